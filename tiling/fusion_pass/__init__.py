"""The fusion pass for unfused modules (XLA's ``service/gpu/transforms/priority_fusion`` and its
friends): ``priority_fusion.fuse_module`` drives the stages over a ``graph.FusionGraph``:
producer-consumer fusion judged by ``decisions`` and ``tile_check``, ``attention``
(with ``attention_pattern``), ``tiled_merge`` (a dot's prologues also judged by time in
``dot_prologue``) and ``multi_output``; ``builder`` writes the fused
computations and ``traffic_model`` reports the bytes a fused module moves.
"""

"""The VJP rules, one per opcode, alphabetical: ``vjp_<op>(ctx, instr, ct)`` returns one
cotangent per operand (``None`` for none).  ``call`` and ``fusion`` have no rule: they are
inlined before the reverse pass (``flatten``), as are loops with a known trip count.

>>> list(VJP_RULES) == sorted(VJP_RULES)
True
>>> from fusion.opcodes import is_known
>>> all(is_known(op) for op in VJP_RULES)
True
"""
from __future__ import annotations

from fusion.autodiff.reverse_pass import Rule
from fusion.autodiff.rules_collective import COLLECTIVE_VJP_RULES
from fusion.autodiff.rules_control import CONTROL_VJP_RULES
from fusion.autodiff.rules_convolution import CONVOLUTION_VJP_RULES
from fusion.autodiff.rules_data import DATA_VJP_RULES
from fusion.autodiff.rules_dot import DOT_VJP_RULES
from fusion.autodiff.rules_elementwise import ELEMENTWISE_VJP_RULES
from fusion.autodiff.rules_fft import FFT_VJP_RULES
from fusion.autodiff.rules_indexed import INDEXED_VJP_RULES
from fusion.autodiff.rules_library import LIBRARY_VJP_RULES
from fusion.autodiff.rules_reduce import REDUCE_VJP_RULES
from fusion.rule_tables import merge_rule_families


VJP_RULES: dict[str, Rule] = merge_rule_families(
    "VJP",
    COLLECTIVE_VJP_RULES,
    CONTROL_VJP_RULES,
    CONVOLUTION_VJP_RULES,
    DATA_VJP_RULES,
    DOT_VJP_RULES,
    ELEMENTWISE_VJP_RULES,
    FFT_VJP_RULES,
    INDEXED_VJP_RULES,
    LIBRARY_VJP_RULES,
    REDUCE_VJP_RULES,
)

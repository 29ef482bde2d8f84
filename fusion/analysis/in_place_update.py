"""Whether a loop fusion can update a parameter's buffer in place (XLA's in-place DUS emitter).

XLA (``CanEmitFusedDynamicUpdateSliceInPlaceForGpu``) then writes only the updated window
instead of copying the whole operand.  It requires:

* every output is a ``dynamic-update-slice``, possibly behind one bitcast, with a single
  path of bitcasts to the root (a root tuple does not count as a user);
* operand 0 of each is a fusion parameter (possibly through a bitcast), so the output buffer
  can be that parameter's buffer;
* the parameter is read elsewhere in the fusion only at the same index (elementwise ops,
  bitcasts, tuples) or by a ``dynamic-slice`` of the updated window at the same offsets,
  otherwise a thread could read an element after another thread overwrote it;
* all updates have the same shape.

XLA also checks, with buffer assignment, that the parameter and the output share one
allocation slice; without buffer assignment this analysis assumes they do.
"""
from __future__ import annotations

from collections import deque

from fusion.analysis.hero import is_elementwise, operand
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits


def _output_dus(computation: HloComputation, root: HloInstruction) -> HloInstruction | None:
    if root.opcode == "dynamic-update-slice":
        return root
    if root.opcode == "bitcast" and root.operands:
        inner = operand(computation, root, 0)
        if inner.opcode == "dynamic-update-slice":
            return inner
    return None


def _real_users(computation: HloComputation, name: str) -> tuple[str, ...]:
    root = computation.root
    return tuple(
        u for u in computation.users[name] if not (u == root.name and root.opcode == "tuple")
    )


def _check_one(computation: HloComputation, dus: HloInstruction) -> str:
    """Empty when ``dus`` can be emitted in place, else why not."""
    node = dus
    while users := _real_users(computation, node.name):
        if len(users) != 1:
            return f"dynamic-update-slice {dus.name!r} has several users"
        node = computation.instruction(users[0])
        if node.opcode != "bitcast":
            return f"dynamic-update-slice {dus.name!r} is used by {node.opcode} {node.name!r}"
    target = operand(computation, dus, 0)
    if target.opcode == "bitcast":
        target = operand(computation, target, 0)
    if target.opcode != "parameter":
        return (
            f"operand 0 of dynamic-update-slice {dus.name!r} is {target.opcode} "
            f"{target.name!r}, not a fusion parameter"
        )
    update = operand(computation, dus, 1)
    starts = dus.operands[2:]
    visited = {target.name, dus.name}
    queue = deque([target.name])
    while queue:
        for u in computation.users[queue.popleft()]:
            user = computation.instruction(u)
            if user.opcode == "dynamic-slice" and user.operands[0] == dus.operands[0] and (
                isinstance(user.shape, ArrayShape)
                and isinstance(update.shape, ArrayShape)
                and user.shape.dims == update.shape.dims
            ):
                if update.shape.num_elements != 1 and tuple(user.operands[1:]) != starts:
                    return (
                        f"parameter {target.name!r} is read by dynamic-slice {u!r} at other "
                        f"offsets than dynamic-update-slice {dus.name!r} writes"
                    )
            elif u != dus.name and not traits(user.opcode).wraps_operands and not (
                is_elementwise(computation, user)
            ):
                return (
                    f"parameter {target.name!r} updated by {dus.name!r} is also read by "
                    f"{user.opcode} {u!r} at other indices"
                )
            if u not in visited:
                visited.add(u)
                queue.append(u)
    return ""


def in_place_dynamic_update_slice(
    computation: HloComputation,
    roots: tuple[str, ...],
    fusion_instr: HloInstruction | None = None,
    module: HloModule | None = None,
) -> tuple[bool, str]:
    """``(True, reason)`` when the fusion updates a parameter in place; else ``(False, why)``.

    ``why`` is empty when no output is a dynamic-update-slice at all.
    """
    del module
    found = [_output_dus(computation, computation.instruction(r)) for r in roots]
    if not any(found):
        return False, ""
    if not all(found):
        return False, "only some outputs are dynamic-update-slices"
    duses = [d for d in found if d is not None]
    update_dims = {
        tuple(operand(computation, d, 1).shape.dims)  # type: ignore[union-attr]
        for d in duses
    }
    if len(update_dims) != 1:
        return False, "the dynamic-update-slices have updates of different shapes"
    for dus in duses:
        why = _check_one(computation, dus)
        if why:
            return False, why + " (so no in-place dynamic-update-slice)"
    targets = []
    for dus in duses:
        target = operand(computation, dus, 0)
        if target.opcode == "bitcast":
            target = operand(computation, target, 0)
        targets.append(f"{target.name!r} (parameter {target.attr('parameter_number')})")
    via = "" if fusion_instr is None else f" of fusion {fusion_instr.name!r}"
    return True, (
        "in_place_dynamic_update_slice: every output"
        f"{via} is a dynamic-update-slice ({', '.join(repr(d.name) for d in duses)}) into "
        f"fusion parameter {', '.join(targets)}, which is otherwise only read at the same "
        "index, so only the updated window is written (assuming buffer assignment lets the "
        "output share the parameter's buffer, which XLA checks)"
    )

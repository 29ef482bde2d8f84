"""Names of the torch ops ``torch_op`` registers: ``<namespace>::<name>``, checked up front.

The dispatcher wants ASCII identifiers: a non-ASCII name fails deep inside torch with a
``UnicodeDecodeError``, a ``::`` in the namespace with a bare ``ValueError``, and a name that
already exists in a built-in namespace (``aten::add``) would quietly bind to torch's own op.
So both parts are checked here, each with a ``BadArgumentError`` that says what is allowed.

>>> op_namespace("fusion"), op_name("rms_norm")
('fusion', 'rms_norm')
>>> op_name("rmsnorm.1", derived=True)  # a module's name, made an identifier
'rmsnorm_1'
>>> try:
...     op_namespace("aten")
... except BadArgumentError as error:
...     print(error.message)
namespace 'aten' belongs to PyTorch; custom ops there could shadow or bind to built-in operators
"""
from __future__ import annotations

import keyword
import re

from fusion.errors import BadArgumentError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

#: Namespaces PyTorch (or a library it ships) registers its own operators in; a custom op
#: there could shadow or be shadowed by a built-in one.  Any name starting with ``_`` is
#: refused too (``_c10d_functional``, ``_quantized``, ...: torch's private namespaces).
BUILTIN_NAMESPACES = frozenset({
    "aten", "c10d", "c10d_functional", "debugprims", "fbgemm", "higher_order", "inductor",
    "mkl", "mkldnn", "nvprims", "onednn", "prim", "prims", "profiler", "quantized",
    "quantized_decomposed", "rngprims", "sparse", "test", "torch", "torchvision", "xnnpack",
})


def op_namespace(namespace: str) -> str:
    """``namespace`` if it is a valid namespace of our own, else a ``BadArgumentError``."""
    if not isinstance(namespace, str) or not _IDENTIFIER.match(namespace):
        raise BadArgumentError(f"torch op namespace {namespace!r} is not an ASCII identifier",
                               where=str(namespace),
                               expected="letters, digits and '_', not starting with a digit "
                                        "(no '::' or '.'), e.g. 'fusion'")
    if namespace.startswith("_") or namespace.lower() in BUILTIN_NAMESPACES:
        raise BadArgumentError(f"namespace {namespace!r} belongs to PyTorch; custom ops there "
                               "could shadow or bind to built-in operators", where=namespace,
                               expected="a namespace of your own, e.g. 'fusion' (the default)")
    return namespace


def op_name(name: str, *, derived: bool = False) -> str:
    """The op name: ``name`` checked, or, when ``derived`` from a module's name, made an
    ASCII identifier (every other character becomes ``_``)."""
    if not isinstance(name, str):
        raise BadArgumentError(f"torch op name must be a string, got {type(name).__name__}",
                               where=repr(name))
    if derived:
        name = re.sub(r"[^A-Za-z0-9_]", "_", name)
        if not name or name[0].isdigit():
            name = "_" + name
        return name + "_" if keyword.iskeyword(name) else name
    if not _IDENTIFIER.match(name):
        bad = sorted({c for c in name if not re.match(r"[A-Za-z0-9_]", c)})
        why = f" (it has {', '.join(map(repr, bad))})" if bad else ""
        raise BadArgumentError(f"torch op name {name!r} is not an ASCII identifier{why}",
                               where=name, expected="letters, digits and '_', not starting "
                                                    "with a digit, e.g. 'rms_norm'")
    if keyword.iskeyword(name):
        raise BadArgumentError(f"torch op name {name!r} is a Python keyword: "
                               f"torch.ops.<namespace>.{name} could not be written",
                               where=name, expected=f"another name, e.g. '{name}_'")
    return name

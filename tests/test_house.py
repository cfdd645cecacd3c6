"""The house rules, read off the library's own source: every method abstract or final (no
concrete method overridden, as equinox's abstract/final pattern has it), no `hasattr`
dispatch, no module over 600 lines (Python, C++ and CUDA), no import circle."""

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import equinox as eqx

import ukjax

ROOT = Path(ukjax.__file__).parent
LIMIT = 600


def _library_modules() -> list[str]:
    names = ["ukjax"] + [m.name for m in pkgutil.walk_packages(ukjax.__path__, "ukjax.")]
    return [name for name in names if not name.startswith("ukjax.cli")]


def _sources() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*") if p.suffix in (".py", ".cc", ".h", ".cu") and "__pycache__" not in p.parts)


def test_no_concrete_method_is_overridden():
    classes = set()
    for name in _library_modules():
        for value in vars(importlib.import_module(name)).values():
            if inspect.isclass(value) and issubclass(value, eqx.Module) and value.__module__.startswith("ukjax"):
                classes.add(value)
    overridden = []
    for cls in classes:
        for base in cls.__mro__[1:]:
            if not base.__module__.startswith("ukjax"):
                continue
            for attribute, value in vars(base).items():
                concrete = callable(value) and not getattr(value, "__isabstractmethod__", False)
                if not attribute.startswith("__") and concrete and attribute in vars(cls):
                    overridden.append(f"{cls.__module__}.{cls.__qualname__}.{attribute} over {base.__qualname__}")
    assert len(classes) > 50  # the walk found the library's modules
    assert overridden == []


def test_no_hasattr_dispatch():
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in _sources()
        if path.suffix == ".py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr"
    ]
    assert found == []


def test_no_module_over_600_lines():
    lengths = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in _sources()}
    assert any(name.endswith(".h") for name in lengths)  # the C++ sources are read too
    assert {name: n for name, n in lengths.items() if n > LIMIT} == {}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The library modules `name` imports when it is imported (module level, outside
    `if TYPE_CHECKING:`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(x for x in (base, node.module) if x)
            targets = [f"{module}.{alias.name}" for alias in node.names]
            found |= {t for t in targets if t in known} or ({module} & known)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names} & known
    return found - {name}


def test_no_import_circle():
    modules = {}
    for name in _library_modules() + [m.name for m in pkgutil.walk_packages(ukjax.__path__, "ukjax.") if "cli" in m.name]:
        spec = importlib.util.find_spec(name)
        modules[name] = Path(spec.origin)
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    assert graph["ukjax._systems"]  # the parse found imports
    circles, state = [], {}

    def visit(name, trail):
        state[name] = "open"
        for other in sorted(graph[name]):
            if state.get(other) == "open":
                circles.append(trail[trail.index(other) :] + [other])
            elif other not in state:
                visit(other, trail + [other])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert circles == []


def test_the_lazy_table_lists_what_the_type_checking_block_imports():
    tree = ast.parse((ROOT / "__init__.py").read_text())
    (block,) = (node for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
    imported = {}
    for node in block.body:
        for alias in node.names:
            assert alias.asname == alias.name  # re-exported `X as X`
            module = "ukjax" + (f".{alias.name}" if node.module is None else f".{node.module}")
            imported[alias.name] = (module, None if node.module is None else alias.name)
    assert imported == ukjax._EXPORTS
    assert sorted(imported) == ukjax.__all__

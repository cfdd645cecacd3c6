"""After `mkdocs build --strict`: every public name of `ukjax` and `ukjax.models` has a
docstring (read by griffe, as mkdocstrings reads it) and an entry in the built site's API
pages. Exits non-zero with the names that miss one."""

import sys
import types
from pathlib import Path

import griffe

import ukjax
from ukjax import models

site = Path(sys.argv[1] if len(sys.argv) > 1 else "site")
html = "\n".join(p.read_text() for p in (site / "api").rglob("*.html"))
package = griffe.load("ukjax")
missing = []
for module, prefix in ((ukjax, "ukjax"), (models, "ukjax.models")):
    for name in dir(module):
        if name.startswith("_") or isinstance(getattr(module, name), types.ModuleType):
            continue
        path = f"{prefix}.{name}"
        obj = package[path.removeprefix("ukjax.")]
        target = obj.final_target if obj.is_alias else obj
        if not (target.docstring and target.docstring.value.strip()):
            missing.append(f"{path}: no docstring")
        if f'id="{path}"' not in html:
            missing.append(f"{path}: no entry in {site}/api")
print("\n".join(missing) or f"every public name documented in {site}/api")
sys.exit(1 if missing else 0)

"""A mkdocs hook: every page's Python snippets run, in order and in one process a page, while
the site is built, and a snippet that fails fails the build (a page's blocks are one program,
so a later block may use an earlier one's names)."""

import os
import re
import subprocess
import sys
import tempfile

from mkdocs.exceptions import PluginError

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def on_page_markdown(markdown, page, config, files):
    """Run the page's ```python blocks; raise where they fail. The page is left as it is."""
    blocks = _BLOCK.findall(markdown)
    if not blocks:
        return markdown
    with tempfile.TemporaryDirectory() as scratch:  # what a snippet writes (a .gif) goes there
        environment = dict(os.environ, MPLBACKEND="Agg")
        run = subprocess.run(
            [sys.executable, "-c", "\n".join(blocks)], cwd=scratch, env=environment, capture_output=True, text=True
        )
    if run.returncode:
        raise PluginError(f"A Python snippet of {page.file.src_path} failed:\n{run.stderr[-3000:]}")
    return markdown

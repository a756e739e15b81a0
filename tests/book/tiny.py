"""The tiny throwaway chapters the tests of gradcore.book execute, check and publish in a temporary repo."""

from __future__ import annotations

from pathlib import Path

from gradcore.book import layout, notebooks

REPO = Path(__file__).resolve().parents[2]


HEADER = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
    jupytext_version: 1.19.6
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""


TINY = HEADER + """
# A tiny chapter

Some prose with math $x^2$.

```{code-cell} ipython3
:tags: [parameters]
profile = "ci"
n = 3
scale = 0.5
flag = False
label = "x"
```

```{code-cell} ipython3
import os, time
from tqdm import tqdm
for i in tqdm(range(n * 5), mininterval=0, bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}"):
    time.sleep(0.01)
print("result", n * scale, flag, label, os.environ["GRADCORE_PROFILE"])
```

```{code-cell} ipython3
n + 1
```

```{code-cell} ipython3
import matplotlib.pyplot as plt
plt.figure(figsize=(1, 1))
_ = plt.plot([0, n])
```
"""


FAILING = HEADER + """
# A failing chapter

```{code-cell} ipython3
:tags: [parameters]
profile = "ci"
```

```{code-cell} ipython3
x = 1
```

```{code-cell} ipython3
y = x + 1  # fine
raise ValueError("boom")
```
"""


def source_notebook(root, name="tiny"):
    """The chapter as a notebook, as if executed, without running a kernel."""
    return notebooks.normalise(layout.read_source(root / "book" / f"{name}.md"))


def write_fake_executed(root, name="tiny"):
    path = root / "notebooks" / f"{name}.ipynb"
    notebooks.write_notebook(source_notebook(root, name), path)
    return path


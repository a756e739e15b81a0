"""The book's tooling: how the chapters are executed, checked and published. The science never
imports it.

* :mod:`gradcore.book.cli`: the ``gradcore`` command (``run``, ``build``, ``check``, ``test``, ...);
* :mod:`gradcore.book.layout`: where chapters are, their parameters and profiles, the table of
contents;
* :mod:`gradcore.book.execution`: one chapter executed with papermill, in the kernel environment
nbval uses;
* :mod:`gradcore.book.notebooks`: committed notebooks normalised, so that a rerun changes no byte;
* :mod:`gradcore.book.freshness`: is every committed notebook its chapter's source, executed?
* :mod:`gradcore.book.status`: the Status page (where the numbers came from) and the results page;
* :mod:`gradcore.book.browser`: the built book opened in headless Chromium;
* :mod:`gradcore.book.reproducibility` and :mod:`gradcore.book.nbval_tolerance`: what counts as
reproduced,
  cell by cell, on another CPU;
* :mod:`gradcore.book.jobs`: the work run as single-threaded processes, as many at once as there are
cores;
* :mod:`gradcore.book.fixtures`: small data sets in the real archives' layout, for the paper
profiles' smoke runs.

Every function takes the repository root, so the tests work on a copy in a temporary folder.
"""

"""The exact analyses: what the maths says, computed where it is exact (float64 numpy, closed
forms).

* :mod:`gradcore.analysis.dense`: one float64 dense network (weights, activations, gradients) the
analyses share;
* :mod:`gradcore.analysis.linear`: the linear unit of the DLG chapter, its input read off the shared
gradient exactly;
* :mod:`gradcore.analysis.walkback`: Geiping et al. (2020), Proposition 3.1: the input walked back
through
  fully-connected layers from one gradient;
* :mod:`gradcore.analysis.exclusivity`: Pan et al. (2022): exclusively activated neurons, the secure
boundary,
  artifact batches, exclusivity reduction;
* :mod:`gradcore.analysis.minimal`: Qian, Nassar and Hansen: the minimal model structure for input
  reconstruction (closed forms, the counting argument, the two-step CNN deconvolution);
* :mod:`gradcore.analysis.blas`: BLAS thread control, so that exact results repeat bit for bit.

The attacks built on them live in :mod:`gradcore.attacks` (``analytic``, ``exclusivity``), the
chapters' experiments in :mod:`gradcore.experiments`: the same concept, one module per wing.
"""

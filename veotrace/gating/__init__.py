"""The CI gate: saved baselines and the statistical verdict of a run against them.

This subpackage owns the baseline file format (``veotrace-baseline/1``: a ``metrics`` map keyed by
analysis name, so fragmentation or bursts can add their own entry later, with the parameters that
change the numbers, a fingerprint of the inputs and the veotrace version; ``baseline.py``), the
one-sided, autocorrelation-aware tests of a run against one baseline (circular block bootstrap with an
automatic block length; ``stats.py``, ``compare.py``), the change-point test of a run against a
history of baselines (E-Divisive on per-run means; ``history.py``) and the CI-native outputs that are
not terminal views (JUnit XML, GitHub Actions workflow commands; ``ci.py``). It reads no trace itself:
the CLI runs the analysis with the baseline's parameters and hands the result over.
"""

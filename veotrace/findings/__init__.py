"""What went wrong, when, in what order: typed findings (``findings/1``) read from the analyses' results.

Owns the finding record and its ranking (``model``: kind, span on one time axis, impact, confidence,
severity, evidence, the command that shows it, a suggestion; links between findings by time order
only, never called a cause) and the rules that turn each analysis' JSON into findings (``rules``: one
function per analysis, each rule stated in its docstring). Pure functions on the commands' JSON
(``RunResult.to_dict()``): running the analyses is ``veotrace diagnose``'s (``reporting.diagnose``).
"""

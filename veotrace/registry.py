"""The one registry of veotrace's commands and analyses: what each is called and where each of its parts lives.

Every part is named by reference (``"module:attribute"``) and imported only when used, so that this
module imports nothing and every layer may read it (``veotrace --help`` loads no analysis). The CLI
registers its commands from here, ``info`` lists what a file supports from here, the report picks
its sections from here, ``--plot`` finds its plotter here, and ``veotrace.<command>()`` (the Python
API) finds its run function here. Adding an analysis means its modules and one entry below; a
test (``tests/test_registry.py``) walks the entries and fails on an incomplete one.

The entries' order is the order of ``veotrace --help``, of the commands ``info`` lists for a file,
and of the report's sections.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Entry:
    """One command, or one analysis of a command (``bursts --events kernels``).

    Attributes:
        name: the analysis as ``info`` lists it and the report titles it ("bursts --events kernels").
        command: the CLI command ("bursts"); its API function is the same name with "_" for "-".
        run: the run function (``veotrace.runs``): options as keywords -> a ``RunResult``.
        cli: the module that declares the command's options (``veotrace.cli``).
        title: the report section's title (None: not in the report).
        section: fills the report section from the run's result (``veotrace.reporting.sections``).
        plot: draws the result (``veotrace.plot``), None when it has no picture.
        supports: ``fn(FileInfo) -> str | None``: the line ``info`` lists when the file feeds this
            analysis (None: it does not); None for commands ``info`` never lists.
        api: False for a variant that shares its command's API function.
    """

    name: str
    command: str
    run: str
    cli: str
    title: str | None = None
    section: str | None = None
    plot: str | None = None
    supports: str | None = None
    api: bool = True

    @property
    def api_name(self) -> str:
        """The Python API function: ``veotrace.l2_breakpoints`` for ``l2-breakpoints``."""
        return self.command.replace("-", "_")


_INFO = "veotrace.analysis.info"
ENTRIES: tuple[Entry, ...] = (
    Entry("entropy", "entropy", "veotrace.runs.entropy:entropy", "veotrace.cli.entropy",
          title="Size-class entropy over time", section="veotrace.reporting.sections:entropy",
          plot="veotrace.plot.entropy:plot_entropy", supports=f"{_INFO}:supports_entropy"),
    Entry("convert", "convert", "veotrace.runs.convert:convert", "veotrace.cli.convert",
          supports=f"{_INFO}:supports_convert"),
    Entry("bursts", "bursts", "veotrace.runs.bursts:bursts", "veotrace.cli.bursts",
          title="Allocation bursts", section="veotrace.reporting.sections:bursts",
          plot="veotrace.plot.bursts:plot_bursts", supports=f"{_INFO}:supports_bursts"),
    Entry("fragmentation", "fragmentation", "veotrace.runs.fragmentation:fragmentation", "veotrace.cli.fragmentation",
          title="Fragmentation over time", section="veotrace.reporting.sections:fragmentation",
          plot="veotrace.plot.fragmentation:plot_fragmentation", supports=f"{_INFO}:supports_fragmentation"),
    Entry("simulate", "simulate", "veotrace.runs.simulate:simulate", "veotrace.cli.simulate",
          title="Allocator what-if", section="veotrace.reporting.sections:simulate",
          plot="veotrace.plot.simulate:plot_simulate", supports=f"{_INFO}:supports_simulate"),
    Entry("bursts --events kernels", "bursts", "veotrace.runs.bursts:bursts", "veotrace.cli.bursts",
          title="Kernel-launch bursts", section="veotrace.reporting.sections:bursts",
          plot="veotrace.plot.bursts:plot_bursts", supports=f"{_INFO}:supports_kernel_bursts", api=False),
    Entry("l2-breakpoints", "l2-breakpoints", "veotrace.runs.l2:l2_breakpoints", "veotrace.cli.l2",
          title="L2 breakpoints per kernel", section="veotrace.reporting.sections:l2",
          plot="veotrace.plot.l2:plot_l2", supports=f"{_INFO}:supports_l2"),
    Entry("correlate", "correlate", "veotrace.runs.correlate:correlate", "veotrace.cli.correlate",
          title="Address jumps vs optical-flow error", section="veotrace.reporting.sections:correlate",
          plot="veotrace.plot.correlate:plot_correlate", supports=f"{_INFO}:supports_correlate"),
    Entry("coherence", "coherence", "veotrace.runs.coherence:coherence", "veotrace.cli.coherence",
          title="Coherence collapse", section="veotrace.reporting.sections:coherence",
          plot="veotrace.plot.coherence:plot_coherence", supports=f"{_INFO}:supports_coherence"),
    Entry("tune", "tune", "veotrace.runs.tune:tune", "veotrace.cli.tune",
          title="Allocator settings recommended (tune)", section="veotrace.reporting.sections:tune",
          plot="veotrace.plot.tune:plot_tune", supports=f"{_INFO}:supports_tune"),
    Entry("sites", "sites", "veotrace.runs.sites:sites", "veotrace.cli.sites",
          title="Allocation sites and stranded memory", section="veotrace.reporting.sections:sites",
          plot="veotrace.plot.sites:plot_sites", supports=f"{_INFO}:supports_sites"),
    Entry("view", "view", "veotrace.runs.view:view", "veotrace.cli.view",
          title="Memory timeline (interactive)", section="veotrace.reporting.sections:view",
          plot="veotrace.plot.view:plot_view", supports=f"{_INFO}:supports_view"),
    Entry("diff", "diff", "veotrace.comparison.run:diff", "veotrace.cli.diff",
          title="Two runs compared", section="veotrace.reporting.sections:diff",
          plot="veotrace.plot.diff:plot_diff", supports=f"{_INFO}:supports_diff"),
    Entry("info", "info", "veotrace.runs.info:info", "veotrace.cli.info"),
    Entry("gate", "gate", "veotrace.runs.gate:gate", "veotrace.cli.gate"),
    Entry("report", "report", "veotrace.reporting.run:report", "veotrace.cli.report"),
    Entry("diagnose", "diagnose", "veotrace.reporting.diagnose:diagnose", "veotrace.cli.diagnose",
          plot="veotrace.plot.findings:plot_findings"),
    Entry("categories", "categories", "veotrace.runs.categories:categories", "veotrace.cli.categories"),
    Entry("banks", "banks", "veotrace.runs.banks:banks", "veotrace.cli.banks"),
    Entry("formats", "formats", "veotrace.runs.formats:formats", "veotrace.cli.formats"),
)

BY_NAME: dict[str, Entry] = {e.name: e for e in ENTRIES}
#: Commands that serve the ones above and are no analysis (no run function, API, info line or section): their CLI modules.
SERVICES: dict[str, str] = {"mcp": "veotrace.cli.mcp"}


def entry(name: str) -> Entry:
    """The entry of analysis or command ``name``.

    Raises:
        KeyError: no such analysis.
    """
    return BY_NAME[name]


def commands() -> list[Entry]:
    """One entry per CLI command, in ``--help`` order."""
    seen: dict[str, Entry] = {}
    for e in ENTRIES:
        seen.setdefault(e.command, e)
    return list(seen.values())


def in_report() -> list[Entry]:
    """The analyses the report can show (a title and a section), in the report's order."""
    return [e for e in ENTRIES if e.section is not None]


def resolve(ref: str) -> Any:
    """The object a ``"module:attribute"`` reference names (imported now)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)

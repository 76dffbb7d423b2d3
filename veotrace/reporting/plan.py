"""Report layer: which analyses to run on which files, from what ``info`` says each file supports."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

#: Formats whose files in one folder are parts of one log (rotation) and are read together; other
#: files (profiles, exports, frame tables) are each their own run.
ROTATED = ("alloc-csv", "alloc-jsonl")
#: Formats whose files in one folder are the ranks of one run (one trace per rank: a lane each), read
#: together as the commands read such a folder.
RANKS = ("kineto",)
_PAIR_KEY = re.compile(r"addr(?:esse)?s?|epe")


@dataclass
class Job:
    """One analysis over the files read together (like one CLI run), with its parameters."""

    command: str  # entropy, bursts, bursts --events kernels, l2-breakpoints, correlate, coherence
    paths: list[Path]
    params: dict = field(default_factory=dict)
    note: str | None = None  # why the analysis cannot run (shown instead of a result)
    shown: list[str] | None = None  # how the command line names the files (a folder for all of its files)

    @property
    def cli(self) -> str:
        """The equivalent command line."""
        opts = [f"--{k.replace('_', '-')} {v}" for k, v in self.params.items() if v is not None]
        return " ".join(["veotrace", self.command, *(self.shown or [str(p) for p in self.paths]), *opts])


def plan(infos: list, groups: list[list[int]]) -> list[Job]:
    """The jobs for ``infos`` (analysis.info.FileInfo), files grouped by the PATH that named them.

    Inside a group, alloc logs of one folder and format are read together (rotated logs), and so are the
    profiler traces of one folder (its ranks: one run); every other
    file is its own run; correlate pairs ADDRS with EPE arrays by name; two PATHs that diff compares
    (each one run) are also compared.
    """
    jobs: list[Job] = []
    runs: dict[int, list] = {}  # per group, the files diff reads as one run
    for g, group in enumerate(groups):
        sets: dict[tuple, list] = {}
        for i in group:
            info = infos[i]
            if info.error:
                continue
            for cmd in info.supports:
                base = _base(cmd)
                if base is None or cmd.endswith("(address strides)"):  # convert, strides of an array
                    continue
                if base == "diff":  # of two PATHs, not of one file
                    runs.setdefault(g, []).append(info)
                    continue
                together = (info.format in ROTATED or info.format in RANKS) and base != "coherence"
                key = (base, str(Path(info.path).parent), info.format) if together else (base, info.path)
                sets.setdefault(key, []).append(info)
        arrays = []
        for (base, *_), members in sets.items():
            if base == "correlate":
                arrays.extend(members)
            else:
                jobs.append(_job(base, members))
        jobs.extend(_correlate_jobs(arrays))
    jobs.extend(_diff_job(list(runs.values())))
    in_folder = Counter(str(Path(i.path).parent) for i in infos)
    for job in jobs:
        folders = {str(p.parent) for p in job.paths}
        if len(job.paths) > 1 and len(folders) == 1 and in_folder[next(iter(folders))] == len(job.paths):
            job.shown = [str(job.paths[0].parent) + "/"]
    return jobs


def _diff_job(runs: list[list]) -> list[Job]:
    """diff BEFORE AFTER when the report was given two PATHs that are each one run (a file, or one folder's logs)."""
    if len(runs) != 2:
        return []
    sides = []
    for members in runs:
        folders = {str(Path(m.path).parent) for m in members}
        if len(members) > 1 and len(folders) > 1:
            return []
        sides.append(Path(members[0].path) if len(members) == 1 else Path(folders.pop()))
    return [Job("diff", sides)]


def _base(cmd: str) -> str | None:
    """The report's analysis (``veotrace.registry``) of a line ``info`` lists, or None when it has no section."""
    from veotrace import registry

    names = [e.name for e in registry.in_report() if cmd == e.name or cmd.startswith(e.name + " ")]
    return max(names, key=len) if names else None


def _job(base: str, members: list) -> Job:
    """The job over ``members``; entropy's window is left to the analysis, which picks one that gives a
    usable series when the default does not (and says why), as ``veotrace entropy PATH`` does."""
    from veotrace.sources.remote import as_path

    return Job(base, [as_path(m.path) for m in members])  # a Path, or a URL (sources.remote)


def _correlate_jobs(arrays: list) -> list[Job]:
    """ADDRS/EPE pairs: inside one .npz (arrays named *addr* and *epe*), or two files of a folder named so."""
    jobs, singles = [], {}
    for info in arrays:
        names = list((info.details.get("arrays") or {}).get("arrays", {}))
        addr = next((n for n in names if "addr" in n.lower()), None)
        epe = next((n for n in names if "epe" in n.lower()), None)
        path = Path(info.path)
        if len(names) > 1 and addr and epe:
            jobs.append(Job("correlate", [path, path], {"addrs_name": addr, "epe_name": epe}))
            continue
        stem = path.name.split(".")[0].lower()
        role = "addrs" if "addr" in stem else "epe" if "epe" in stem else None
        if role is None:
            jobs.append(Job("correlate", [path], note="holds arrays, but correlate needs an ADDRS and an EPE "
                            "array: name them *addrs* and *epe* (in one .npz or two files of a folder) or run "
                            "'veotrace correlate ADDRS EPE'"))
            continue
        singles.setdefault((str(path.parent), _PAIR_KEY.sub("", stem)), {})[role] = path
    for found in singles.values():
        if "addrs" in found and "epe" in found:
            jobs.append(Job("correlate", [found["addrs"], found["epe"]]))
        else:
            lone = next(iter(found.values()))
            jobs.append(Job("correlate", [lone], note="no matching " + ("EPE" if "addrs" in found else "ADDRS")
                            + " file beside it; run 'veotrace correlate ADDRS EPE'"))
    return jobs

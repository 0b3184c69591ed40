"""What a job run is given and how it answers (contract section 3), as Python values.

A job is any command; DataBuild runs it with the refs it must build and read in its environment.
This module reads that environment once, types it, and gives the conventions a name:

- ``job.outputs`` / ``job.inputs``: the refs of this run, ``job.data_dir``: where they live;
- ``job.fields``: the output pattern's fields, typed as the pattern declares them
  (``{date:date}`` a :class:`datetime.date`, ``{n:int}`` an :class:`int`, others :class:`str`);
- ``job.open_output()``: a writer that makes the partition appear whole or not at all;
- ``job.report({...})``: what the run recorded (shown by ``databuild explain``);
- ``job.missing([...])``: "these inputs are not there yet": DataBuild builds them and retries;
- ``job.configs(fn)``: the entry point of a ``config`` executable.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Mapping, NoReturn, Optional, Sequence, Union

FieldValue = Union[datetime.datetime, datetime.date, int, str]
"""A field of the output's pattern, typed as the pattern declares it."""

ConfigInput = Union[str, Mapping[str, str]]
"""An input a config chooses: a ref (read as ``materialize``) or ``{"ref": ..., "dep": "query"}``."""


class JobError(Exception):
    """The run's environment is not what DataBuild gives a job (say, a run started by hand)."""


def _typed(name: str, value: str, kind: str) -> FieldValue:
    try:
        if kind == "date":
            return datetime.date.fromisoformat(value)
        if kind == "int":
            return int(value)
        if kind == "hour":
            return _hour(value)
    except ValueError as e:
        raise JobError(f"field `{name}` = {value!r} is not of its type {kind}: {e}") from None
    return value


def _hour(value: str) -> datetime.datetime:
    """A ``YYYY-MM-DDTHH`` hour as an aware UTC datetime."""
    try:
        if len(value) != 13:
            raise ValueError
        hour = datetime.datetime.strptime(value, "%Y-%m-%dT%H")
    except ValueError:
        raise ValueError("an hour is written YYYY-MM-DDTHH (UTC, hours 00 to 23)") from None
    return hour.replace(tzinfo=datetime.timezone.utc)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class Job:
    """One job run, read from the environment given (``os.environ`` unless told otherwise)."""

    def __init__(self, environ: Optional[Mapping[str, str]] = None) -> None:
        self._environ = os.environ if environ is None else environ

    def _get(self, name: str, default: Optional[str] = None) -> str:
        value = self._environ.get(name, default)
        if value is None:
            raise JobError(
                f"`{name}` is not set: this is not a DataBuild job run "
                "(run it through `databuild build`, or set the variables of contract section 3)"
            )
        return value

    def _refs(self, name: str) -> list[str]:
        # A list too long for the environment comes in a file (contract section 3).
        path = self._environ.get(f"{name}_FILE")
        if path is not None:
            try:
                text = Path(path).read_text()
            except OSError as e:
                raise JobError(f"`{name}_FILE` names `{path}`, which cannot be read: {e}") from None
        else:
            optional = name in ("DATABUILD_INPUTS", "DATABUILD_QUERY_INPUTS")
            text = self._get(name, "[]" if optional else None)
        try:
            refs = json.loads(text)
        except json.JSONDecodeError as e:
            raise JobError(f"`{name}` is not a JSON array of refs: {e}") from None
        if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
            raise JobError(f"`{name}` is not a JSON array of refs")
        return refs

    @property
    def outputs(self) -> list[str]:
        """The refs this run must make available."""
        return self._refs("DATABUILD_OUTPUTS")

    @property
    def output(self) -> str:
        """The run's one output (an error for a run of several: use :attr:`outputs`)."""
        outputs = self.outputs
        if len(outputs) != 1:
            raise JobError(f"this run has {len(outputs)} outputs, not one: use `job.outputs`")
        return outputs[0]

    @property
    def inputs(self) -> list[str]:
        """The refs this run reads."""
        return self._refs("DATABUILD_INPUTS")

    @property
    def query_inputs(self) -> list[str]:
        """The query inputs (``dep = "query"``) present as the run started: read them if useful.
        An absent one is not listed."""
        return self._refs("DATABUILD_QUERY_INPUTS")

    @property
    def data_dir(self) -> Path:
        """The absolute path partitions live under (``<data_dir>/<ref>``)."""
        return Path(self._get("DATABUILD_DATA_DIR"))

    @property
    def job_run_id(self) -> str:
        return self._get("DATABUILD_JOB_RUN_ID")

    @property
    def build_request_id(self) -> str:
        return self._get("DATABUILD_BUILD_REQUEST_ID")

    @property
    def attempt(self) -> int:
        """1 for the first try; one more for each retry of the same run."""
        return int(self._get("DATABUILD_ATTEMPT", "1"))

    @property
    def fields(self) -> dict[str, FieldValue]:
        """The output pattern's fields of a single-output run, by their name in the pattern."""
        types = json.loads(self._environ.get("DATABUILD_TYPES", "{}"))
        prefix = "DATABUILD_FIELD_"
        found = {}
        for key, value in self._environ.items():
            if key.startswith(prefix):
                upper = key[len(prefix):]
                # The environment upper-cases names; the pattern's own spelling is in the types.
                name = next((n for n in types if n.upper() == upper), upper.lower())
                found[name] = _typed(name, value, types.get(name, "str"))
        return found

    def path(self, ref: str) -> Path:
        """Where partition ``ref`` lives."""
        return self.data_dir / ref

    def output_path(self, ref: Optional[str] = None) -> Path:
        """Where the run writes an output (the run's one output unless ``ref`` is given): under
        ``DATABUILD_OUTPUT_DIR``, from where DataBuild moves it into place once the event log has
        recorded the run's success (older DataBuilds, without it: in place)."""
        ref = self.output if ref is None else ref
        if ref not in self.outputs:
            raise JobError(f"`{ref}` is not an output of this run ({', '.join(self.outputs)})")
        staging = self._environ.get("DATABUILD_OUTPUT_DIR")
        return Path(staging) / ref if staging else self.path(ref)

    @contextlib.contextmanager
    def open_output(
        self, ref: Optional[str] = None, mode: str = "w", encoding: Optional[str] = "utf-8"
    ) -> Iterator[IO[Any]]:
        """Writes an output atomically: into a temporary file beside it, flushed to disk, then
        renamed into place when the block ends without an error. A run that fails or is killed
        mid-write leaves the partition as it was (absent, or the previous version), never half of
        it."""
        if mode not in ("w", "wb"):
            raise JobError(f"open_output writes a whole partition: mode must be 'w' or 'wb', not {mode!r}")
        path = self.output_path(ref)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with open(fd, mode, encoding=None if "b" in mode else encoding) as f:
                yield f
                f.flush()
                # mkstemp makes the file its owner's only; a partition gets the usual mode.
                os.fchmod(f.fileno(), 0o666 & ~_umask())
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def write_text(self, text: str, ref: Optional[str] = None) -> Path:
        """Writes an output's whole text atomically (see :meth:`open_output`)."""
        with self.open_output(ref) as f:
            f.write(text)
        return self.output_path(ref)

    def write_json(self, value: Any, ref: Optional[str] = None) -> Path:
        """Writes an output as JSON atomically (see :meth:`open_output`)."""
        return self.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", ref)

    def report(self, values: Mapping[str, Any]) -> None:
        """Records ``values`` (a JSON object: row counts, provenance) with the run. Metrics
        reported before with :meth:`report_metric` are kept, unless ``values`` has ``metrics``."""
        if not isinstance(values, Mapping):
            raise JobError("a report is a JSON object: pass a dict")
        values = dict(values)
        if "metrics" not in values and "metrics" in self._report():
            values["metrics"] = self._report()["metrics"]
        self._write_report(values)

    def report_metric(self, ref: str, name: str, value: float) -> None:
        """Records a number about output ``ref`` (``rows``, ``nulls``, ...) with the run, merged
        into its report: DataBuild keeps it per partition (``runs ID``, ``run_metrics``)."""
        if ref not in self.outputs:
            raise JobError(
                f"cannot report a metric of {ref!r}: it is not one of the run's outputs "
                f"({', '.join(self.outputs)})"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise JobError(f"metric {name!r} of {ref!r} must be a number, not {value!r}")
        values = self._report()
        values.setdefault("metrics", {}).setdefault(ref, {})[name] = value
        self._write_report(values)

    def _report(self) -> dict[str, Any]:
        path = Path(self._get("DATABUILD_REPORT"))
        try:
            values = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        return values if isinstance(values, dict) else {}

    def _write_report(self, values: Mapping[str, Any]) -> None:
        path = Path(self._get("DATABUILD_REPORT"))
        path.write_text(json.dumps(dict(values), sort_keys=True), encoding="utf-8")

    def missing(self, refs: Sequence[str], code: int = 1) -> NoReturn:
        """Says these inputs are not there yet and ends the run: DataBuild makes them live and
        runs it again (this is not counted as a failure)."""
        if isinstance(refs, str):
            refs = [refs]
        print(f"DATABUILD_MISSING_DEPS {json.dumps(list(refs))}", flush=True)
        sys.exit(code)

    def configs(
        self,
        choose: Callable[[str], Mapping[str, Any]],
        argv: Optional[Sequence[str]] = None,
        out: IO[str] = sys.stdout,
    ) -> None:
        """The entry point of a ``config`` executable: for each requested output ref (the
        arguments), ``choose(ref)`` returns what its run reads and gets, as a dict of ``inputs``
        (refs, or ``{"ref": ..., "dep": "query"}``), ``args`` and ``env``; the answer is printed
        as DataBuild expects it (one run per output)."""
        refs = list(sys.argv[1:] if argv is None else argv)
        configs = []
        for ref in refs:
            chosen = dict(choose(ref))
            unknown = set(chosen) - {"inputs", "args", "env"}
            if unknown:
                raise JobError(f"config for `{ref}`: unknown keys {sorted(unknown)} (inputs, args, env)")
            inputs = [
                {"ref": i} if isinstance(i, str) else dict(i) for i in chosen.get("inputs", [])
            ]
            configs.append(
                {
                    "outputs": [ref],
                    "inputs": inputs,
                    "args": [str(a) for a in chosen.get("args", [])],
                    "env": {str(k): str(v) for k, v in chosen.get("env", {}).items()},
                }
            )
        json.dump({"configs": configs}, out)
        out.write("\n")
        out.flush()


job = Job()
"""The job run this process is (its environment is read when a property is asked for)."""

"""A suite file: a TOML matrix of tests for `logquake suite`, expanded and checked up front.

    [suite]
    name = "ci"                     # names the suite's directory; default: the file's stem
    results_dir = "results"         # where the runs go (default results, from the current directory)

    [defaults]                      # test fields every test starts from
    time_limit_s = 30

    [configurations.durable]        # named configurations: any test fields but name and seed
    client_config = { "enable.idempotence" = "true" }
    cluster_config = { "min.insync.replicas" = 2 }

    [[test]]
    name = "queue"                  # required, unique
    workloads = ["queue", "delivery"]           # or workload = "queue"
    nemeses = [["kill", "partition"], []]       # or nemesis = ["kill"] ("kill,partition" also works)
    configurations = ["durable"]                # or configuration = "durable"
    seeds = [1, 2]                              # or seed = 1; default: one random seed
    expect = "invalid"              # default "valid"; "invalid": the run must be flagged for at least
    anomalies = ["lost-write"]      # one of these, and for nothing outside them and
    also_allowed = ["poll-skip"]    # these (with "valid", `anomalies` names the allowed anomalies the
                                    # run may list, for the reader; also_allowed needs "invalid")

Test fields are `logquake.TestSpec`'s (the options of `logquake test` with units in their
names: `time_limit_s`, `rate_hz`, `client_config`, ...). A test takes `[defaults]`, then its
configuration, then its own keys; the three config tables are merged key by key. Each test
expands to workloads × nemeses × configurations × seeds runs, in that order (Jepsen's
test-all). Every run is checked by `logquake test`'s own code before anything runs: bad TOML,
an unknown key or a refused option is a SuiteFileError naming the file, the table and the key.
"""

from __future__ import annotations

import itertools
import secrets
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from harness.store import StoreError, check_test_name

SUITE_KEYS = frozenset({"name", "results_dir", "description"})
TOP_KEYS = ("suite", "defaults", "configurations", "test")
AXES = {"workload": "workloads", "nemesis": "nemeses", "configuration": "configurations", "seed": "seeds"}
ENTRY_ONLY = frozenset({"name", "description", "expect", "anomalies", "also_allowed"})
CONFIG_TABLES = ("client_config", "cluster_config", "workload_options")
EXPECT_VALUES = ("valid", "invalid")


class SuiteFileError(ValueError):
    """The suite file cannot be run; the message names the file and the key."""


@dataclass(frozen=True)
class SuiteRun:
    """One cell of the matrix: a test spec and what the suite expects of it."""

    index: int  # 1-based, in run order
    entry: str  # the [[test]] it came from
    run_name: str  # the results directory's test name
    configuration: str | None
    spec: Any  # logquake.TestSpec, seed fixed
    expectation: Any  # harness.junit.Expectation
    command: str  # the `logquake test` command that reproduces it

    @property
    def id(self) -> str:
        return f"{self.run_name}-seed{self.spec.seed}"


@dataclass(frozen=True)
class SuiteDefinition:
    path: Path
    name: str
    description: str
    results_dir: Path
    runs: list[SuiteRun]


def _spec_fields() -> dict[str, Any]:
    from logquake.api import TestSpec

    return {f.name: f for f in fields(TestSpec)}


def load_suite(path: str | Path, *, results_dir: str | Path | None = None) -> SuiteDefinition:
    """Read, expand and check the suite file; raises SuiteFileError."""
    from logquake.api import SpecError, TestSpec, prepare

    from harness.junit import Expectation

    file = Path(path)
    where = str(file)
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SuiteFileError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SuiteFileError(f"{where}: not valid TOML: {exc}") from None
    _known(where, "the top level", raw, TOP_KEYS)
    suite = _table(where, "[suite]", raw.get("suite", {}))
    _known(where, "[suite]", suite, SUITE_KEYS)
    name = _string(where, "[suite] name", suite.get("name", file.stem))
    try:
        check_test_name(name)
    except StoreError as exc:
        raise SuiteFileError(f"{where}: [suite] name: {exc}") from None
    description = _string(where, "[suite] description", suite.get("description", ""))
    root = Path(results_dir) if results_dir is not None else Path(_string(where, "[suite] results_dir",
                                                                            suite.get("results_dir", "results")))
    spec_fields = _spec_fields()
    test_keys = (set(spec_fields) - {"name", "nemesis", "workload", "seed"}) | set(AXES) | set(AXES.values())
    defaults = _table(where, "[defaults]", raw.get("defaults", {}))
    _known(where, "[defaults]", defaults, sorted(test_keys - {"configuration", "configurations"}))
    configurations: dict[str, dict[str, Any]] = {}
    for config_name, table in _table(where, "[configurations]", raw.get("configurations", {})).items():
        label = f"[configurations.{config_name}]"
        table = _table(where, label, table)
        _known(where, label, table, sorted(test_keys - set(AXES) - set(AXES.values())))
        configurations[config_name] = table
    entries = raw.get("test", [])
    if not isinstance(entries, list) or not entries:
        raise SuiteFileError(f"{where}: no tests: add at least one [[test]] table")
    runs: list[SuiteRun] = []
    seen: set[str] = set()
    for number, entry in enumerate(entries, 1):
        entry = _table(where, f"[[test]] #{number}", entry)
        if "name" not in entry:
            raise SuiteFileError(f"{where}: [[test]] #{number}: key 'name' is missing (every test needs a name)")
        entry_name = _string(where, f"[[test]] #{number} name", entry["name"])
        label = f"[[test]] {entry_name!r}"
        if entry_name in seen:
            raise SuiteFileError(f"{where}: {label}: the name is used by another [[test]]")
        seen.add(entry_name)
        _known(where, label, entry, sorted(test_keys | ENTRY_ONLY))
        expectation = _expectation(where, label, entry, Expectation)
        axes = {}
        for single, plural in AXES.items():
            axes[single] = _axis(where, label, entry, defaults, single, plural)
        for configuration in axes["configuration"]:
            if configuration is not None and configuration not in configurations:
                raise SuiteFileError(f"{where}: {label}: configuration {configuration!r} is not defined; defined: "
                                     f"{', '.join(sorted(configurations)) or 'none'} ([configurations.NAME] tables)")
        for workload, nemesis, configuration, seed in itertools.product(
                axes["workload"], axes["nemesis"], axes["configuration"], axes["seed"]):
            layers = [defaults, configurations.get(configuration, {}) if configuration else {},
                      {k: v for k, v in entry.items() if k not in ENTRY_ONLY}]
            values: dict[str, Any] = {}
            for layer in layers:
                for key, value in layer.items():
                    if key in AXES or key in AXES.values():
                        continue
                    if key in CONFIG_TABLES:
                        values[key] = {**values.get(key, {}), **_config_table(where, label, key, value)}
                    else:
                        values[key] = value
            nemesis_names = _nemesis_list(where, label, nemesis)
            parts = [entry_name]
            if len(axes["workload"]) > 1:
                parts.append(str(workload or "queue"))
            if len(axes["nemesis"]) > 1:
                parts.append("+".join(nemesis_names) or "no-faults")
            if len(axes["configuration"]) > 1 and configuration:
                parts.append(configuration)
            run_name = "-".join(parts)
            spec_values = {**values, "nemesis": tuple(nemesis_names), "name": run_name,
                           "seed": seed if seed is not None else secrets.randbelow(2**31)}
            if workload is not None:
                spec_values["workload"] = workload
            spec = _spec(where, label, TestSpec, spec_fields, spec_values)
            try:
                prepared = prepare(spec, root)
            except SpecError as exc:
                raise SuiteFileError(f"{where}: {label} ({run_name}, seed {spec.seed}): {exc}") from None
            runs.append(SuiteRun(index=len(runs) + 1, entry=entry_name, run_name=run_name,
                                 configuration=configuration, spec=spec, expectation=expectation,
                                 command=prepared.run_spec.command))
    return SuiteDefinition(path=file, name=name, description=description, results_dir=root, runs=runs)


def _known(where: str, label: str, table: dict[str, Any], known: Any) -> None:
    for key in table:
        if key not in known:
            raise SuiteFileError(f"{where}: {label}: unknown key {key!r}; known keys: {', '.join(sorted(known))}")


def _table(where: str, label: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SuiteFileError(f"{where}: {label} must be a table, got {type(value).__name__}")
    return value


def _string(where: str, label: str, value: Any) -> str:
    if not isinstance(value, str):
        raise SuiteFileError(f"{where}: {label} must be a string, got {value!r}")
    return value


def _axis(where: str, label: str, entry: dict[str, Any], defaults: dict[str, Any], single: str,
          plural: str) -> list[Any]:
    """The values of one matrix axis: the entry's, else the defaults', else [None]."""
    for source, table in ((label, entry), ("[defaults]", defaults)):
        if single in table and plural in table:
            raise SuiteFileError(f"{where}: {source}: give {single!r} or {plural!r}, not both")
        if plural in table:
            values = table[plural]
            if not isinstance(values, list) or not values:
                raise SuiteFileError(f"{where}: {source}: key {plural!r} must be a non-empty list")
            if single == "nemesis":
                return values
            for value in values:
                _scalar(where, source, plural, single, value)
            return values
        if single in table:
            value = table[single]
            if single != "nemesis":
                _scalar(where, source, single, single, value)
            return [value]
    return [[] if single == "nemesis" else None]


def _scalar(where: str, label: str, key: str, single: str, value: Any) -> None:
    wanted = int if single == "seed" else str
    if not isinstance(value, wanted) or isinstance(value, bool):
        raise SuiteFileError(f"{where}: {label}: key {key!r}: {value!r} is not a{'n integer' if wanted is int else ' string'}")


def _nemesis_list(where: str, label: str, value: Any) -> list[str]:
    if isinstance(value, str):
        return [n.strip() for n in value.split(",") if n.strip()]
    if isinstance(value, list) and all(isinstance(n, str) for n in value):
        return [n.strip() for n in value if n.strip()]
    raise SuiteFileError(f"{where}: {label}: a nemesis must be a list of fault names (e.g. [\"kill\", \"partition\"]) "
                         f"or a comma list string, got {value!r}")


def _config_table(where: str, label: str, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SuiteFileError(f"{where}: {label}: key {key!r} must be a table of settings, got {value!r}")
    out = {}
    for name, setting in value.items():
        if isinstance(setting, bool):
            out[name] = "true" if setting else "false"  # Kafka's and librdkafka's spelling
        elif isinstance(setting, (str, int, float)):
            out[name] = str(setting)
        elif key == "workload_options" and isinstance(setting, list):
            out[name] = ",".join(str(s) for s in setting)
        else:
            raise SuiteFileError(f"{where}: {label}: {key}.{name} must be a string, number or boolean, got {setting!r}")
    return out


def _expectation(where: str, label: str, entry: dict[str, Any], expectation_class: Any) -> Any:
    from checkers.claims import VIOLATES

    verdict = entry.get("expect", "valid")
    if verdict not in EXPECT_VALUES:
        raise SuiteFileError(f"{where}: {label}: key 'expect' must be one of {', '.join(EXPECT_VALUES)}, got {verdict!r}")
    lists = {}
    for key in ("anomalies", "also_allowed"):
        names = entry.get(key, [])
        if not isinstance(names, list) or not all(isinstance(a, str) for a in names):
            raise SuiteFileError(f"{where}: {label}: key {key!r} must be a list of anomaly names")
        for anomaly in names:
            if anomaly not in VIOLATES:
                raise SuiteFileError(f"{where}: {label}: {key}: {anomaly!r} is not an anomaly logquake reports; "
                                     f"known: {', '.join(sorted(VIOLATES))}")
        lists[key] = tuple(names)
    if lists["also_allowed"] and (verdict != "invalid" or not lists["anomalies"]):
        raise SuiteFileError(f"{where}: {label}: key 'also_allowed' needs expect = \"invalid\" and a list of "
                             "expected 'anomalies'")
    return expectation_class(verdict, lists["anomalies"], lists["also_allowed"])


def _spec(where: str, label: str, spec_class: Any, spec_fields: dict[str, Any], values: dict[str, Any]) -> Any:
    numbers = {"nemesis_interval_s", "time_limit_s", "final_time_limit_s", "quiet_period_s", "rate_hz"}
    integers = {"concurrency", "brokers"}
    for key, value in values.items():
        bad = ((key in numbers and (not isinstance(value, (int, float)) or isinstance(value, bool)))
               or (key in integers and (not isinstance(value, int) or isinstance(value, bool)))
               or (key in ("workload", "bootstrap_servers") and not isinstance(value, str)))
        if bad:
            raise SuiteFileError(f"{where}: {label}: key {key!r}: {value!r} is not a "
                                 f"{'number' if key in numbers else 'integer' if key in integers else 'string'}")
    return spec_class(**{k: v for k, v in values.items() if k in spec_fields})

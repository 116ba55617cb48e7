"""Reading logquake's JUnit XML as a CI system would: validated against the Jenkins schema
(junit-10.xsd, put in the venv by scripts/fetch-junit-xsd), then parsed with junitparser."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import xmlschema
from junitparser import Error, Failure, JUnitXml, Skipped

XSD = Path(sys.prefix) / "share" / "logquake-test" / "junit-10.xsd"


@dataclass
class Case:
    name: str
    classname: str
    outcome: str  # passed | failure | error | skipped
    message: str
    text: str
    output: str


@dataclass
class Suite:
    name: str
    tests: int
    failures: int
    errors: int
    skipped: int
    properties: dict[str, str]
    cases: dict[str, Case] = field(default_factory=dict)


def read_junit(path: Path) -> list[Suite]:
    assert XSD.is_file(), f"{XSD} is missing: `make setup` puts it there (scripts/fetch-junit-xsd {sys.prefix})"
    xmlschema.XMLSchema(str(XSD)).validate(str(path))  # raises with the offending element
    document = JUnitXml.fromfile(str(path))
    suites = []
    for suite in document:
        parsed = Suite(name=suite.name, tests=suite.tests, failures=suite.failures, errors=suite.errors,
                       skipped=suite.skipped, properties={p.name: p.value for p in suite.properties()})
        for case in suite:
            results = case.result
            outcome, message, text = "passed", "", ""
            if results:
                first = results[0]
                outcome = {Failure: "failure", Error: "error", Skipped: "skipped"}[type(first)]
                message, text = first.message or "", first.text or ""
            parsed.cases[case.name] = Case(case.name, case.classname, outcome, message, text, case.system_out or "")
        suites.append(parsed)
    return suites

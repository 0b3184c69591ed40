"""Helpers shared by the jobs: where partitions live and how to read and write them."""
import json
import os
from pathlib import Path
from typing import Iterable, Iterator

DATA_DIR = Path(os.environ.get("DATABUILD_DATA_DIR", "data"))


def outputs() -> list[str]:
    return json.loads(os.environ["DATABUILD_OUTPUTS"])


def inputs() -> list[str]:
    return json.loads(os.environ.get("DATABUILD_INPUTS", "[]"))


def field(name: str) -> str:
    return os.environ[f"DATABUILD_FIELD_{name.upper()}"]


def read_jsonl(ref: str) -> Iterator[dict]:
    with open(DATA_DIR / ref, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def write_jsonl(ref: str, rows: Iterable[dict]) -> int:
    """Writes rows atomically: readers never see a half-written partition."""
    path = DATA_DIR / ref
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")
            count += 1
    tmp.replace(path)
    return count


def write_json(ref: str, value: dict) -> None:
    path = DATA_DIR / ref
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)

"""Writes a number derived deterministically from a name: the same name always gives the same number."""
import hashlib
import json
import os
from pathlib import Path


def number_for(name: str) -> int:
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % 100


def main() -> None:
    data_dir = Path(os.environ["DATABUILD_DATA_DIR"])
    for ref in json.loads(os.environ["DATABUILD_OUTPUTS"]):
        name = ref.split("/", 1)[1]
        path = data_dir / ref
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{number_for(name)}\n")
        print(f"{ref}: {number_for(name)}")


if __name__ == "__main__":
    main()

"""Sums generated numbers.

`sum.py config REF...` prints the inputs of each requested sum (`sum/a_b` reads
`generated_number/a` and `generated_number/b`); `sum.py run NAMES` writes the sum.
"""
import json
import os
import sys
from pathlib import Path


def config(refs: list[str]) -> None:
    configs = []
    for ref in refs:
        names = ref.split("/", 1)[1].split("_")
        configs.append({
            "outputs": [ref],
            "inputs": [{"ref": f"generated_number/{n}", "dep": "materialize"} for n in names],
            "args": [ref.split("/", 1)[1]],
        })
    print(json.dumps({"configs": configs}))


def run(names: str) -> None:
    data_dir = Path(os.environ["DATABUILD_DATA_DIR"])
    total = sum(int((data_dir / f"generated_number/{n}").read_text()) for n in names.split("_"))
    out = data_dir / f"sum/{names}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"{total}\n")
    print(f"sum/{names}: {total}")


if __name__ == "__main__":
    command, rest = sys.argv[1], sys.argv[2:]
    if command == "config":
        config(rest)
    else:
        run(rest[0])

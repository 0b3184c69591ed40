"""Non-blocking check of a daily summary: a category should get at least MIN_REVIEWS reviews a
day; fewer is worth a look (a feed that dried up), not a reason to hold the summary back."""
import json
import os
import sys
from pathlib import Path

MIN_REVIEWS = int(os.environ.get("MIN_REVIEWS", "20"))


def main() -> int:
    summary = json.loads(Path(os.environ["DATABUILD_PARTITION_PATH"]).read_text(encoding="utf-8"))
    n = summary.get("review_count") or 0
    report = {
        "message": f"{n} reviews" + ("" if n >= MIN_REVIEWS else f", fewer than {MIN_REVIEWS}"),
        "metrics": {"reviews": n, "min_reviews": MIN_REVIEWS},
    }
    Path(os.environ["DATABUILD_REPORT"]).write_text(json.dumps(report), encoding="utf-8")
    return 0 if n >= MIN_REVIEWS else 1


if __name__ == "__main__":
    sys.exit(main())

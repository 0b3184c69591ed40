"""Blocking check of a daily summary: it names at least one phrase (at most five, no repeats),
and its review count is the number of reviews of its category that day."""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "jobs"))
from common import DATA_DIR, field, read_jsonl  # noqa: E402


def main() -> int:
    summary = json.loads(Path(os.environ["DATABUILD_PARTITION_PATH"]).read_text(encoding="utf-8"))
    category, date = field("category"), field("date")
    reviews = sum(1 for _ in read_jsonl(f"categorized_reviews/category={category}/date={date}"))
    phrases = summary.get("top_phrases") or []
    problems = []
    if not phrases:
        problems.append("no phrases")
    if len(phrases) > 5 or len(set(phrases)) != len(phrases):
        problems.append(f"{len(phrases)} phrases, {len(set(phrases))} distinct (at most 5, no repeats)")
    if summary.get("review_count") != reviews:
        problems.append(f"review_count {summary.get('review_count')} but {reviews} reviews that day")
    report = {
        "message": "; ".join(problems) if problems else f"{reviews} reviews, {len(phrases)} phrases",
        "metrics": {"reviews": reviews, "phrases": len(phrases)},
    }
    Path(os.environ["DATABUILD_REPORT"]).write_text(json.dumps(report), encoding="utf-8")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

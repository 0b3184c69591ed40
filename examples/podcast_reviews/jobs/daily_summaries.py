"""The day's summary for a category: review count, mean rating, and the phrases most used."""
import json

from common import DATA_DIR, field, inputs, outputs, read_jsonl, write_json


def main() -> None:
    reviews_ref, stats_ref = inputs()
    [ref] = outputs()
    reviews = list(read_jsonl(reviews_ref))
    stats = json.loads((DATA_DIR / stats_ref).read_text(encoding="utf-8"))
    used = sorted((p for p in stats["phrases"] if p["mentions"]), key=lambda p: (-p["mentions"], p["phrase"]))
    summary = {
        "category": field("category"),
        "date": field("date"),
        "review_count": len(reviews),
        "mean_rating": round(sum(r["rating"] for r in reviews) / len(reviews), 3) if reviews else None,
        "top_phrases": [p["phrase"] for p in used[:5]],
    }
    write_json(ref, summary)
    print(f"{ref}: {summary['review_count']} reviews, mean rating {summary['mean_rating']}")


if __name__ == "__main__":
    main()

"""How often a day's reviews of a category use the category's top phrases, and how they rate."""
import json

from common import DATA_DIR, inputs, outputs, read_jsonl, write_json
from phrase_models import phrases


def main() -> None:
    model_ref, reviews_ref = inputs()
    [ref] = outputs()
    model = json.loads((DATA_DIR / model_ref).read_text(encoding="utf-8"))
    stats = {p["phrase"]: {"mentions": 0, "rating_sum": 0} for p in model["top_phrases"]}
    for review in read_jsonl(reviews_ref):
        for phrase in set(phrases(review["text"])) & stats.keys():
            stats[phrase]["mentions"] += 1
            stats[phrase]["rating_sum"] += review["rating"]
    rows = [
        {
            "phrase": phrase,
            "mentions": s["mentions"],
            "mean_rating": round(s["rating_sum"] / s["mentions"], 2) if s["mentions"] else None,
        }
        for phrase, s in stats.items()
    ]
    write_json(ref, {"phrases": rows})
    print(f"{ref}: {sum(r['mentions'] for r in rows)} mentions")


if __name__ == "__main__":
    main()

"""The top phrases (word pairs) of a category over the trailing 7 days of reviews."""
from collections import Counter

from common import inputs, outputs, read_jsonl, write_json

STOPWORDS = {"and", "the", "a", "of", "to", "my", "on", "over", "after", "this", "is"}
TOP = 10


def phrases(text: str) -> list[str]:
    words = [w for w in text.split() if w not in STOPWORDS]
    return [f"{a} {b}" for a, b in zip(words, words[1:])]


def main() -> None:
    [ref] = outputs()
    counts = Counter()
    reviews = 0
    for day in inputs():
        for review in read_jsonl(day):
            counts.update(phrases(review["text"]))
            reviews += 1
    top = [{"phrase": p, "count": c} for p, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]]
    write_json(ref, {"window_days": len(inputs()), "reviews": reviews, "top_phrases": top})
    print(f"{ref}: {len(top)} phrases from {reviews} reviews")


if __name__ == "__main__":
    main()

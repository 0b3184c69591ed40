"""Stands in for an external feed: a deterministic day of raw podcast reviews.

The same date always yields the same reviews, so builds are reproducible. Some rows are dirty on
purpose (blank text, out-of-range ratings) for extract_reviews to clean.
"""
import hashlib
import random

from common import field, outputs, write_jsonl

CATEGORIES = ["business", "comedy", "news", "technology", "true_crime"]
PODCASTS = {
    "business": ["Market Hours", "The Founder Files", "Spreadsheet Stories"],
    "comedy": ["Laugh Track", "Two Mics No Plan", "The Awkward Hour"],
    "news": ["Morning Briefing", "The Daily Ledger", "World in Ten"],
    "technology": ["Byte Sized", "The Stack", "Open Source Hour"],
    "true_crime": ["Cold Case Notes", "The Alibi", "Evidence Room"],
}
OPINIONS = {
    5: ["absolutely love this show", "best podcast ever", "always makes my commute", "great host chemistry"],
    4: ["really enjoy the episodes", "great host chemistry", "solid weekly listen", "well researched stories"],
    3: ["decent but uneven", "some episodes drag", "good sound quality", "hit or miss"],
    2: ["too many ads", "host talks over guests", "episodes drag on", "sound quality issues"],
    1: ["too many ads", "unlistenable audio", "lost me after season one", "host talks over guests"],
}
TITLES = ["Hooked", "Meh", "Must listen", "Not for me", "Weekly ritual", "Disappointed", "Five stars"]


def reviews_for(date: str) -> list[dict]:
    rng = random.Random(int(hashlib.sha256(date.encode()).hexdigest(), 16))
    rows = []
    for i in range(rng.randint(250, 350)):
        category = rng.choice(CATEGORIES)
        rating = rng.choices([1, 2, 3, 4, 5], weights=[1, 1, 2, 3, 4])[0]
        text = " and ".join(rng.sample(OPINIONS[rating], 2))
        if rng.random() < 0.03:
            text = "   "
        if rng.random() < 0.01:
            rating = 9
        rows.append({
            "review_id": f"{date}-{i:04d}",
            "date": date,
            "podcast": rng.choice(PODCASTS[category]),
            "category": category,
            "rating": rating,
            "title": rng.choice(TITLES),
            "text": text,
        })
    return rows


def main() -> None:
    [ref] = outputs()
    n = write_jsonl(ref, reviews_for(field("date")))
    print(f"{ref}: {n} raw reviews")


if __name__ == "__main__":
    main()

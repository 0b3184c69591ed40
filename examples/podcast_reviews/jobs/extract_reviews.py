"""Cleans a day of raw reviews: drops blank texts and impossible ratings, normalizes whitespace."""
from common import inputs, outputs, read_jsonl, write_jsonl


def clean(rows):
    for row in rows:
        text = " ".join(row["text"].split()).lower()
        if not text or not 1 <= row["rating"] <= 5:
            continue
        yield {**row, "text": text, "title": row["title"].strip()}


def main() -> None:
    [raw] = inputs()
    [ref] = outputs()
    kept = write_jsonl(ref, clean(read_jsonl(raw)))
    print(f"{ref}: kept {kept} reviews")


if __name__ == "__main__":
    main()

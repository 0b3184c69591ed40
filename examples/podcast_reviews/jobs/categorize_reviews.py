"""Keeps one category's reviews of a day."""
from common import field, inputs, outputs, read_jsonl, write_jsonl


def main() -> None:
    [reviews] = inputs()
    [ref] = outputs()
    category = field("category")
    n = write_jsonl(ref, (r for r in read_jsonl(reviews) if r["category"] == category))
    print(f"{ref}: {n} reviews")


if __name__ == "__main__":
    main()

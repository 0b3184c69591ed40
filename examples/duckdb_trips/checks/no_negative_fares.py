"""Passes when the day's clean trips have no negative fare (a refund slipped through)."""
import json
import os
import sys

import duckdb

path = os.environ["DATABUILD_PARTITION_PATH"]
sql = f"SELECT count(*) FROM read_parquet('{path}') WHERE fare < 0"
negative = duckdb.connect().execute(sql).fetchone()[0]
with open(os.environ["DATABUILD_REPORT"], "w") as f:
    json.dump({"message": f"{negative} negative fares", "metrics": {"negative_fares": negative}}, f)
sys.exit(1 if negative else 0)

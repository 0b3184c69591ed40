"""Sums a day of orders: reads the table partition it is given (DATABUILD_INPUTS: the alias
resolved to a version, e.g. orders/v2/date=...), writes revenue/date=... as JSON."""
import json
import os

data_dir = os.environ["DATABUILD_DATA_DIR"]
[source] = json.loads(os.environ["DATABUILD_INPUTS"])
[output] = json.loads(os.environ["DATABUILD_OUTPUTS"])

orders = revenue = 0
channels = {}
with open(os.path.join(data_dir, source)) as f:
    for line in f:
        row = json.loads(line)
        orders += 1
        revenue += row["amount"]
        channel = row.get("channel") or "unknown"
        channels[channel] = channels.get(channel, 0) + 1

path = os.path.join(data_dir, output)
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path + ".tmp", "w") as f:
    json.dump({"read": source, "orders": orders, "revenue": round(revenue, 2), "channels": channels}, f)
os.replace(path + ".tmp", path)

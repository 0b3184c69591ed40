"""A day of taxi trips shaped like NYC TLC's yellow-taxi records, made up but the same for the
same date: a few thousand trips between 40 zones, with refunds and trips that went nowhere."""
from common import connect, report_rows, write_parquet
from databuild import job

day = job.fields["date"]
seed = day.toordinal()
con = connect()
# hash(seed, i, k) is the k-th "random" number of trip i: the same every time for a date.
trips = f"""
    WITH t AS (
        SELECT i,
               TIMESTAMP '{day.isoformat()}' + to_seconds(hash({seed}, i, 1) % 86400) AS pickup_at,
               (hash({seed}, i, 2) % 40 + 1)::INTEGER AS pickup_zone,
               (hash({seed}, i, 3) % 40 + 1)::INTEGER AS dropoff_zone,
               (hash({seed}, i, 4) % 4 + 1)::INTEGER AS passengers,
               round((hash({seed}, i, 5) % 2000) / 100.0, 2) AS distance_km,
               hash({seed}, i, 6) % 100 AS roll
        FROM range(2000 + {seed} % 500) r(i)
    )
    SELECT i AS trip_id, pickup_at,
           pickup_at + to_seconds((distance_km * 150 + 60)::BIGINT) AS dropoff_at,
           pickup_zone, dropoff_zone, passengers, distance_km,
           CASE WHEN roll = 0 THEN -round(3 + distance_km * 1.9, 2)
                ELSE round(3 + distance_km * 1.9, 2) END AS fare,
           CASE WHEN roll % 3 = 0 THEN round(distance_km * 0.4, 2) ELSE 0 END AS tip,
           CASE WHEN roll % 3 = 0 THEN 'card' ELSE 'cash' END AS payment_type
    FROM t ORDER BY pickup_at
"""
rows = write_parquet(con, trips, job.output)
report_rows(job.output, rows)

"""DataBuild for Python: a helper for writing jobs and a client for the build graph service.

Inside a job run::

    from databuild import job

    with job.open_output() as f:          # the run's one output, written atomically
        f.write(f"hello for {job.fields['date']:%Y-%m-%d}\\n")
    job.report({"rows": 1})

Talking to a service::

    from databuild import Client

    client = Client("http://127.0.0.1:8080", token="...")
    build = client.build(["reviews/date=2020-01-01"])
    print(client.wait(build).status)
"""

from databuild.client import (
    BuildAnswer,
    Client,
    ClientError,
    LogEvent,
    PartitionStatus,
)
from databuild.job import Job, JobError, job

__all__ = [
    "BuildAnswer",
    "Client",
    "ClientError",
    "Job",
    "JobError",
    "LogEvent",
    "PartitionStatus",
    "job",
]

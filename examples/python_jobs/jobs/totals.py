"""The sum of the trailing three days' numbers."""
from databuild import job

total = 0
for ref in job.inputs:
    total += sum(int(line) for line in job.path(ref).read_text().split())
job.write_json({"date": job.fields["date"].isoformat(), "total": total, "days": len(job.inputs)})
job.report({"inputs": len(job.inputs), "total": total})

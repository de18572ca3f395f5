from __future__ import annotations

from tests.conftest import Api, claim_one, enqueue


def test_job_goes_from_enqueue_to_completed(producer: Api, worker: Api) -> None:
    job = enqueue(producer, "send_email", payload={"to": "a@b.c"}, priority="high")
    assert job["status"] == "pending" and job["priority"] == "high"
    claimed = claim_one(worker)
    assert claimed["id"] == job["id"] and claimed["worker_id"] == "mailer"
    done = worker.post(
        f"/jobs/{job['id']}/complete",
        json={"lease_token": claimed["lease_token"], "result": {"ok": 1}},
    )
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "completed"
    assert producer.get(f"/jobs/{job['id']}").json()["result"] == {"ok": 1}

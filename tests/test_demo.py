"""--demo creates a Demo project on a scratch repository in the data dir, once."""
import os
import subprocess

import taskboard


def test_demo_creates_a_scratch_repo_project_with_tasks_once(tmp_path):
    config = taskboard.parse_args(["--demo", "--db", str(tmp_path / "data" / "tb.db")],
                                  environ={})
    assert "--simulate-agent" in config["agent_argv"]
    taskboard.init(config)
    try:
        projects = taskboard.list_projects()
        assert [p["name"] for p in projects] == ["Demo"]
        repo = projects[0]["workingDir"]
        assert repo.startswith(str(tmp_path / "data"))
        log = subprocess.run(["git", "log", "--oneline"], cwd=repo, capture_output=True,
                             text=True, check=True).stdout
        assert "Initial demo app" in log
        tasks = taskboard.list_tasks(projects[0]["id"])
        assert len(tasks) == len(taskboard.DEMO_TASKS)
        assert {t["status"] for t in tasks} == {"backlog"}
        taskboard.delete_project(projects[0]["id"])
    finally:
        taskboard.shutdown()
    taskboard.init(config)  # a restart does not bring back a deleted Demo project
    try:
        assert taskboard.list_projects() == []
        assert os.path.isdir(repo)
    finally:
        taskboard.shutdown()

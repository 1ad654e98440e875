"""Attachments: upload, download, delete, and where their files live (design.md §3, §4)."""
import os
import sqlite3

import pytest

from conftest import assert_error


def stored_path(tb, attachment_id):
    con = sqlite3.connect(tb.config["db_path"])
    try:
        (path,) = con.execute("SELECT path FROM attachments WHERE id = ?",
                              (attachment_id,)).fetchone()
    finally:
        con.close()
    return os.path.realpath(os.path.join(tb.data_dir, path))


def files_under(folder):
    return sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, _, names in os.walk(folder) for name in names)


def upload(client, task_id, name="notes.txt", content=b"hello", mime="text/plain", **kw):
    return client.post(f"/api/tasks/{task_id}/attachments",
                       upload_files=[("file", name, content, mime)], **kw)


@pytest.fixture
def task(api):
    return api.task(api.project()["id"])


def test_attachment_upload_answers_201_with_attachment(client, task, tb):
    resp = upload(client, task["id"], content=b"hello\n")
    assert resp.status_int == 201
    body = resp.json
    assert {k: body[k] for k in ("taskId", "fileName", "mimeType")} == {
        "taskId": task["id"], "fileName": "notes.txt", "mimeType": "text/plain"}
    assert isinstance(body["id"], int)
    with open(stored_path(tb, body["id"]), "rb") as stored:
        assert stored.read() == b"hello\n"


def test_attachment_download_returns_bytes_with_safe_headers(client, task):
    content = bytes(range(256)) * 4
    attachment = upload(client, task["id"], "page.html", content, "text/html").json
    resp = client.get(f"/api/attachments/{attachment['id']}")
    assert resp.status_int == 200 and resp.body == content
    assert resp.headers["Content-Disposition"].startswith("attachment")
    assert "page.html" in resp.headers["Content-Disposition"]
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in resp.headers["Content-Security-Policy"]


def test_attachment_unicode_name_can_be_downloaded(client, task):
    attachment = upload(client, task["id"], "отчёт.txt", b"data").json
    resp = client.get(f"/api/attachments/{attachment['id']}", expect_errors=True)
    assert resp.status_int == 200 and resp.body == b"data"
    disposition = resp.headers["Content-Disposition"]
    assert disposition.startswith("inline;"), "plain text is inert"
    assert "filename*=UTF-8''%D0%BE%D1%82%D1%87%D1%91%D1%82.txt" in disposition


# --- the stored type comes from the content (design §11) -------------------------------

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x00" * 40
SAFE_HEADERS = {"X-Content-Type-Options": "nosniff",
                "Cross-Origin-Resource-Policy": "same-origin",
                "Content-Security-Policy": "sandbox"}


def download(client, attachment_id):
    resp = client.get(f"/api/attachments/{attachment_id}")
    assert {k: resp.headers.get(k) for k in SAFE_HEADERS} == SAFE_HEADERS
    return resp


@pytest.mark.parametrize("name, content, claimed, stored", [
    ("shot.png", PNG, "text/html", "image/png"),
    ("photo.txt", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "text/plain", "image/jpeg"),
    ("anim", b"GIF89a\x01\x00\x01\x00", None, "image/gif"),
    ("still.gif", b"GIF87a\x01\x00\x01\x00", "application/javascript", "image/gif"),
    ("pic.bin", b"RIFF\x24\x00\x00\x00WEBPVP8 ", "application/octet-stream", "image/webp"),
    ("doc.html", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", "text/html", "application/pdf"),
    ("notes.md", "# Заметки\nutf-8 text\n".encode(), "text/markdown", "text/plain"),
    ("empty.txt", b"", "text/plain", "text/plain"),
])
def test_attachment_inert_type_is_read_from_the_bytes_and_shown_inline(
        client, task, name, content, claimed, stored):
    attachment = upload(client, task["id"], name, content, claimed).json
    assert attachment["mimeType"] == stored
    resp = download(client, attachment["id"])
    assert resp.body == content
    assert resp.headers["Content-Type"] == (
        "text/plain; charset=utf-8" if stored == "text/plain" else stored)
    assert resp.headers["Content-Disposition"].startswith("inline;")


def test_attachment_claiming_javascript_cannot_run_as_a_script(client, task):
    """A page elsewhere loading it with <script src> gets text/plain + nosniff, or nothing."""
    script = b"fetch('/api/projects').then(r => r.text()).then(alert);\n"
    attachment = upload(client, task["id"], "evil.js", script, "text/javascript").json
    assert attachment["mimeType"] == "text/plain"
    resp = download(client, attachment["id"])
    assert resp.body == script
    assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"


@pytest.mark.parametrize("name, content, claimed", [
    ("page.html", b"<!DOCTYPE html><script>alert(1)</script>", "text/html"),
    ("page.txt", b"\xef\xbb\xbf\n  <html><body onload=alert(1)>", "text/plain"),
    ("image.svg", b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
     "image/svg+xml"),
    ("image.png", b'<?xml version="1.0"?><svg onload="alert(1)"/>', "image/png"),
    ("hello.svg", b"hello, no markup yet", "text/plain"),
    ("hello.txt", b"hello, no markup yet", "image/svg+xml"),
    ("hello.htm", b"a\x00binary page", None),
    ("cut.txt", "naïve".encode()[:-1] + b"\xc3", "text/plain"),
])
def test_attachment_markup_or_binary_is_never_inline(client, task, name, content, claimed):
    attachment = upload(client, task["id"], name, content, claimed).json
    assert attachment["mimeType"] == "application/octet-stream"
    resp = download(client, attachment["id"])
    assert resp.body == content
    assert resp.headers["Content-Type"] == "application/octet-stream"
    assert resp.headers["Content-Disposition"].startswith("attachment;")


def test_attachment_type_is_sniffed_across_chunks_of_a_large_upload(client, task):
    """The upload is read in 64 KiB chunks: a NUL or a bad byte far in still counts."""
    text = "é".encode() * (100 * 1024)
    assert upload(client, task["id"], "big.txt", text).json["mimeType"] == "text/plain"
    late_nul = b"a" * (200 * 1024) + b"\x00"
    assert upload(client, task["id"], "nul.txt", late_nul).json["mimeType"] == \
        "application/octet-stream"
    late_bad = b" " * (200 * 1024) + b"\xff"
    assert upload(client, task["id"], "bad.txt", late_bad).json["mimeType"] == \
        "application/octet-stream"


def test_older_attachment_with_an_active_type_still_downloads(client, task, tb):
    """Rows stored before content sniffing keep the uploader's type: never served as is."""
    attachment = upload(client, task["id"], "old.js", b"alert(1)").json
    con = sqlite3.connect(tb.config["db_path"])
    with con:
        con.execute("UPDATE attachments SET mime_type = 'text/javascript' WHERE id = ?",
                    (attachment["id"],))
    con.close()
    resp = download(client, attachment["id"])
    assert resp.headers["Content-Type"] == "application/octet-stream"
    assert resp.headers["Content-Disposition"].startswith("attachment;")


@pytest.mark.parametrize("name", ["../../etc/passwd", "..\\..\\boot.ini", "/etc/passwd",
                                  "a/../../../x.txt", ".bashrc", "..", "../"])
def test_attachment_name_cannot_escape_the_data_dir(client, api, task, tb, name):
    attachment = upload(client, task["id"], name, b"secret").json
    file_name = attachment["fileName"]
    assert file_name and "/" not in file_name and "\\" not in file_name
    assert not file_name.startswith(".")
    path = stored_path(tb, attachment["id"])
    assert path.startswith(os.path.realpath(tb.data_dir) + os.sep)
    assert os.path.basename(path) == file_name
    assert files_under(api.workdir) == []
    assert client.get(f"/api/attachments/{attachment['id']}").body == b"secret"


@pytest.mark.parametrize("name", ["a" * 300 + ".pdf", "日本語" * 60 + ".pdf"])
def test_attachment_long_name_is_shortened_keeping_its_extension(client, task, name):
    resp = upload(client, task["id"], name, b"%PDF", "application/pdf", expect_errors=True)
    assert resp.status_int == 201, resp.text
    file_name = resp.json["fileName"]
    assert file_name.endswith(".pdf") and len(file_name.encode()) <= 255
    assert client.get(f"/api/attachments/{resp.json['id']}").body == b"%PDF"


def test_attachment_same_name_twice_keeps_both(client, task):
    first = upload(client, task["id"], "a.txt", b"one").json
    second = upload(client, task["id"], "a.txt", b"two").json
    assert first["id"] != second["id"]
    assert client.get(f"/api/attachments/{first['id']}").body == b"one"
    assert client.get(f"/api/attachments/{second['id']}").body == b"two"


def test_attachment_is_listed_in_task_detail(client, task):
    attachment = upload(client, task["id"]).json
    detail = client.get(f"/api/tasks/{task['id']}/detail").json
    assert [{k: a[k] for k in ("id", "taskId", "fileName", "mimeType")}
            for a in detail["attachments"]] == [
        {k: attachment[k] for k in ("id", "taskId", "fileName", "mimeType")}]


def test_attachment_delete_removes_record_and_file(client, task, tb):
    attachment = upload(client, task["id"]).json
    path = stored_path(tb, attachment["id"])
    assert client.delete(f"/api/attachments/{attachment['id']}").json == {"ok": True}
    assert not os.path.exists(path)
    assert_error(client.get(f"/api/attachments/{attachment['id']}", expect_errors=True),
                 404, "not_found")
    assert client.get(f"/api/tasks/{task['id']}/detail").json["attachments"] == []
    assert_error(client.delete(f"/api/attachments/{attachment['id']}", expect_errors=True),
                 404, "not_found")


@pytest.mark.parametrize("delete", ["task", "project"])
def test_attachment_files_go_with_their_task_or_project(client, api, tb, delete):
    project = api.project()
    task = api.task(project["id"])
    paths = [stored_path(tb, upload(client, task["id"], f"f{n}.txt").json["id"])
             for n in range(2)]
    assert all(os.path.exists(p) for p in paths)
    url = f"/api/tasks/{task['id']}" if delete == "task" else f"/api/projects/{project['id']}"
    assert client.delete(url).json == {"ok": True}
    assert [p for p in paths if os.path.exists(p)] == []


def test_attachment_without_file_field_is_refused(client, task, tb, snapshot):
    before = snapshot()
    resp = client.post(f"/api/tasks/{task['id']}/attachments",
                       upload_files=[("upload", "a.txt", b"x")], expect_errors=True)
    assert_error(resp, 400, "validation_error", "file")
    assert snapshot() == before
    assert files_under(tb.data_dir + "/attachments") == []


def test_attachment_with_json_body_is_unsupported_media_type(client, task, snapshot):
    before = snapshot()
    resp = client.post_json(f"/api/tasks/{task['id']}/attachments", {"file": "a.txt"},
                            expect_errors=True)
    assert_error(resp, 415, "unsupported_media_type")
    assert snapshot() == before


def test_attachment_for_unknown_task_is_404_and_writes_nothing(client, tb, snapshot):
    before = snapshot()
    resp = upload(client, 9999, expect_errors=True)
    assert_error(resp, 404, "not_found")
    assert snapshot() == before
    assert files_under(tb.data_dir + "/attachments") == []


def test_attachment_over_20_mib_is_refused_and_not_kept(client, task, tb, snapshot):
    before = snapshot()
    resp = upload(client, task["id"], "big.bin", b"x" * (20 * 1024 * 1024 + 1),
                  "application/octet-stream", expect_errors=True)
    assert_error(resp, 413, "payload_too_large")
    assert snapshot() == before
    assert files_under(tb.data_dir + "/attachments") == []


@pytest.mark.parametrize("method", ["get", "delete"])
def test_attachment_unknown_id_is_404(client, method):
    resp = getattr(client, method)("/api/attachments/9999", expect_errors=True)
    assert_error(resp, 404, "not_found")

"""A real OpenSSH server on a loopback port, for the tests of agents on other machines
(design.md §15): Debian's `sshd` (package openssh-server, which .ci/run installs), started
by the test with its own host key and a key-only login as the user running the tests; the
"host" is a folder of this machine, and its login's home (HOME) a folder of its own.  The
keys are made once per test process, and each server gets copies.

    server = SshServer(tmp_path)           # started; .stop() ends it
    server.address, server.port            # "<user>@127.0.0.1", its port
    server.identity                        # the client's private key (a file)
    server.known_hosts                     # a known_hosts file that trusts it
    server.fingerprint                     # "SHA256:..." as `ssh-keygen -lf` prints it
    server.ssh("echo hi")                  # CompletedProcess of one command run there
    server.drop(); server.start()          # the host goes down, and comes back

    trusted_host(client, server, tmp_path) # the host added to a board, its key trusted
"""

import atexit
import getpass
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def sshd_missing() -> str | None:
    """Why these tests cannot run here, or None."""
    if not os.access(SSHD, os.X_OK):
        return "no sshd (Debian: apt-get install openssh-server)"
    if not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        return "no ssh client (Debian: apt-get install openssh-client)"
    return None


def _new_key(path: str) -> str:
    """An ed25519 key pair at path (and path.pub); its fingerprint."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "taskboard-test",
                    "-f", path], check=True, capture_output=True)
    return subprocess.run(["ssh-keygen", "-lf", path + ".pub"], check=True, capture_output=True,
                          text=True).stdout.split()[1]


_KEYS = {}


def _process_keys() -> dict:
    """The host key and the client key of this test process's servers, made once (each
    server gets copies): {file name: path, "fingerprint": the host key's}."""
    if not _KEYS:
        folder = tempfile.mkdtemp(prefix="taskboard-sshd-keys-")
        atexit.register(shutil.rmtree, folder, True)
        _KEYS["fingerprint"] = _new_key(os.path.join(folder, "host_ed25519"))
        _new_key(os.path.join(folder, "id_ed25519"))
        _KEYS.update({name: os.path.join(folder, name)
                      for name in ("host_ed25519", "id_ed25519")})
    return _KEYS


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SshServer:
    def __init__(self, folder, start_timeout=20.0):
        self.folder = os.path.join(str(folder), "sshd")
        os.makedirs(self.folder, mode=0o700)
        self.user = getpass.getuser()
        self.port = _free_port()
        self.address = f"{self.user}@127.0.0.1"
        self.host_key = os.path.join(self.folder, "host_ed25519")
        self.identity = os.path.join(self.folder, "id_ed25519")
        keys = _process_keys()
        for key in (self.host_key, self.identity):
            for suffix in ("", ".pub"):
                shutil.copy(keys[os.path.basename(key)] + suffix, key + suffix)
        shutil.copy(self.identity + ".pub", os.path.join(self.folder, "authorized_keys"))
        self._trust_host_key(keys["fingerprint"])
        # the login's own home: a host whose profile is its own, not the dotfiles of the
        # user running the tests (whose shell startup can cost a second a command); and
        # the key exchange of OpenSSH before 9.0, half the CPU of sntrup761's a connection
        self.home = os.path.join(self.folder, "home")
        os.makedirs(self.home, mode=0o700)
        self.config = config = os.path.join(self.folder, "sshd_config")
        with open(config, "w") as f:
            f.write(f"""Port {self.port}
ListenAddress 127.0.0.1
HostKey {self.host_key}
PidFile {os.path.join(self.folder, "sshd.pid")}
AuthorizedKeysFile {os.path.join(self.folder, "authorized_keys")}
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
MaxSessions 100
MaxStartups 100
SetEnv HOME={self.home}
KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org
""")
        if os.geteuid() == 0:  # root's sshd wants its privilege separation directory
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.log = os.path.join(self.folder, "sshd.log")
        self.start(start_timeout)

    def _trust_host_key(self, fingerprint: str) -> None:
        with open(self.host_key + ".pub") as f:
            kind, blob = f.read().split()[:2]
        self.known_hosts = os.path.join(self.folder, "known_hosts")
        with open(self.known_hosts, "w") as f:
            f.write(f"[127.0.0.1]:{self.port} {kind} {blob}\n")
        self.fingerprint = fingerprint

    def start(self, start_timeout=20.0):
        """Start sshd (again, after stop(): same port, same keys); back once it greets
        on its port."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", self.config], stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}:\n{self.log_text()}")
            if self._greets():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"sshd did not listen in {start_timeout:g} s:\n"
                                   f"{self.log_text()}")
            time.sleep(0.01)

    def _greets(self) -> bool:
        """sshd listens: its port answers with the SSH banner."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                return s.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def new_host_key(self) -> str:
        """Give the (stopped) server another host key; its fingerprint."""
        os.remove(self.host_key)
        os.remove(self.host_key + ".pub")
        self._trust_host_key(_new_key(self.host_key))
        return self.fingerprint

    def ssh_options(self) -> list[str]:
        """What every connection of the tests passes: this key, this server's key only."""
        return ["-p", str(self.port), "-i", self.identity, "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=5", "-F", "/dev/null"]

    def ssh(self, command: str, timeout=30, identity=None) -> subprocess.CompletedProcess:
        options = self.ssh_options()
        if identity is not None:
            options[options.index(self.identity)] = identity
        return subprocess.run(["ssh", *options, self.address, command], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def log_text(self) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()[-3000:]

    def drop(self) -> None:
        """The host goes down: sshd stops and every connection it holds ends at once (what
        its users run there is left to notice)."""
        sessions = [pid for pid in _descendants(self.proc.pid)
                    if _comm(pid) in ("sshd", "sshd-session")]
        self.stop()
        for pid in sessions:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def host_body(sshd, tmp_path, **fields):
    """A host that is this machine through the test's sshd, its folder under tmp_path,
    its claude the scripted fake (with the test's FAKE_AGENT_DIR: the host's login
    environment is not the test's)."""
    from conftest import FAKE_AGENT
    fake = f"env FAKE_AGENT_DIR={os.environ['FAKE_AGENT_DIR']} {sys.executable} {FAKE_AGENT}"
    return {"name": "build box", "address": sshd.address, "port": sshd.port,
            "identityFile": sshd.identity, "baseDir": str(tmp_path / "host"),
            "agentCommands": {"claude": fake}} | fields


def trusted_host(client, sshd, tmp_path, **fields):
    """A host added, checked, its key trusted and checked again."""
    host = client.post_json("/api/hosts", host_body(sshd, tmp_path, **fields), status=201).json
    shown = client.post(f"/api/hosts/{host['id']}/check").json["lastCheck"]
    assert shown["fingerprint"] == sshd.fingerprint, shown
    client.put_json(f"/api/hosts/{host['id']}", {"hostKey": shown["fingerprint"]})
    checked = client.post(f"/api/hosts/{host['id']}/check").json
    assert checked["lastCheck"]["ok"], checked["lastCheck"]
    return checked


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    """Every process below pid (from /proc)."""
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parents[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    found, frontier = [], [pid]
    while frontier:
        here = frontier.pop()
        for child, parent in parents.items():
            if parent == here:
                found.append(child)
                frontier.append(child)
    return found

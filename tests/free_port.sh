# free_port.sh — sourced by the test and bench scripts that must name a port before a process binds
# it (a cluster's RPC and HTTP ports, a restart on the same port).
#
# free_port prints a port of 127.0.0.1 that was free a moment ago and that no earlier call of the
# same script printed: the kernel may hand a just-closed port out again, so two picks in a row can
# name one port twice (a coordinator told to serve RPC and HTTP on one port fails to start). The
# ports a script was given are listed in ${TMPDIR:-/tmp}/pstrain-ports.<the script's pid> ($$ is
# the script's pid in the $(...) subshells too); each call removes the lists of scripts that have
# ended. Racy against other processes, as any pick-then-bind is: where the port need not be known
# in advance, let the process bind port 0 and report it.
free_port() {
  python3 - "${TMPDIR:-/tmp}/pstrain-ports.$$" <<'PY'
import glob, os, socket, sys
path = sys.argv[1]
for old in glob.glob(path.rsplit(".", 1)[0] + ".*"):  # the lists of ended scripts
    pid = old.rsplit(".", 1)[1]
    if old != path and pid.isdigit() and not os.path.exists("/proc/" + pid):
        try:
            os.remove(old)
        except OSError:
            pass
try:
    with open(path) as f:
        given = set(f.read().split())
except OSError:
    given = set()
held = []  # open until a fresh port turns up, so that the kernel names each one once
for _ in range(64):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    held.append(s)
    port = str(s.getsockname()[1])
    if port not in given:
        with open(path, "a") as f:
            f.write(port + "\n")
        print(port)
        sys.exit(0)
sys.exit("free_port: no fresh port in 64 picks")
PY
}

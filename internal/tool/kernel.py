# Shellgate's Python kernel driver, run inside the sandbox (see python.go).
#
#   python3 -I -c SCRIPT serve     the resident driver: owns one IPython
#                                  kernel (jupyter_client) and serves calls
#                                  on a Unix socket, one at a time
#   python3 -I -S -c SCRIPT call R run one call (R: base64 of its JSON) and
#                                  copy the driver's answer lines to stdout
#
# The answer is JSON lines: {"t":"started"} or {"t":"restarted","why":…}
# when the kernel is new, {"t":"stream","name":"stdout"|"stderr","text":…},
# {"t":"display","data":{mime: value}}, {"t":"error","ename","evalue",
# "traceback"}, {"t":"exit","code":…} (sys.exit), {"t":"note","text":…} and last {"t":"done","timed_out":…,
# "dropped":…}. The driver caps what it sends; the host trusts none of it.
import base64, json, os, socket, sys, time

D = "/tmp/.shellgate-kernel"
SOCK = D + "/sock"
HOME = "/workspace/home"


def call(req):
    deadline = time.monotonic() + 60
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(SOCK)
            break
        except OSError:
            s.close()
            if not json.loads(base64.b64decode(req)).get("wait") or time.monotonic() > deadline:
                sys.stdout.write('{"t":"nokernel"}\n')
                sys.exit(3)
            time.sleep(0.02)
    s.sendall(req.encode() + b"\n")
    out = sys.stdout.buffer
    while True:
        b = s.recv(65536)
        if not b:
            break
        out.write(b)
        out.flush()


def serve():
    import queue, select, signal
    from jupyter_client import KernelManager

    os.makedirs(D, mode=0o700, exist_ok=True)
    env = dict(os.environ)
    for k, sub in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_DATA_DIR", "data"),
                   ("JUPYTER_CONFIG_DIR", "config"), ("IPYTHONDIR", "ipython"), ("MPLCONFIGDIR", "mpl")):
        env[k] = os.environ[k] = D + "/" + sub
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    try:
        os.unlink(SOCK)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(SOCK)
    srv.listen(8)
    st = {"km": None, "kc": None, "lost": None}

    def start(w):
        # Unix sockets, not TCP: a sandbox without network has no
        # loopback interface up.
        km = KernelManager(kernel_name="python3", transport="ipc", ip=D + "/k")
        km.start_kernel(cwd=HOME, env=env)
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        # sys.exit(n) ends the call with status n, as it ends a script; the
        # kernel's hint that it does not exit a kernel is noise here.
        kc.execute_interactive("import warnings as _w; _w.filterwarnings('ignore', message='To exit: use'); del _w",
                               silent=True, store_history=False, timeout=60)
        st["km"], st["kc"] = km, kc

    def stop(now=True):
        km, kc = st["km"], st["kc"]
        st["km"] = st["kc"] = None
        if kc is not None:
            kc.stop_channels()
        if km is not None:
            try:
                km.shutdown_kernel(now=now)
            except Exception:
                pass

    while True:
        conn, _ = srv.accept()
        try:
            handle(conn, st, start, stop, queue, select)
        except Exception as e:  # the driver must outlive any one call
            try:
                conn.sendall((json.dumps({"t": "note", "text": "kernel driver error: %s: %s" % (type(e).__name__, e)}) + "\n").encode())
            except OSError:
                pass
        finally:
            # shutdown, not only close: the client's EOF must not wait for
            # the last reference to the socket to be collected.
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


def handle(conn, st, start, stop, queue, select):
    with conn.makefile("rb") as f:
        req = json.loads(base64.b64decode(f.readline(1 << 20)))
    code = req["code"]
    timeout = max(0.001, req.get("timeout_ms", 120000) / 1000.0)
    max_text = int(req.get("max_text", 16384))
    max_images = int(req.get("max_images", 4))
    max_image = int(req.get("max_image_bytes", 2 << 20))

    gone = [False]

    def w(obj):
        if gone[0]:
            return
        try:
            conn.sendall((json.dumps(obj) + "\n").encode())
        except OSError:
            gone[0] = True

    km = st["km"]
    if km is not None and not km.is_alive():
        st["lost"] = "the Python kernel exited (exit status %s)" % km.provisioner.process.returncode if getattr(km, "provisioner", None) and km.provisioner.process else "the Python kernel exited"
        stop()
    if st["km"] is None:
        lost = st["lost"]
        start(w)
        w({"t": "restarted", "why": lost} if lost else {"t": "started"})
        st["lost"] = None
    km, kc = st["km"], st["kc"]
    # Drain what an earlier, interrupted call left on iopub.
    while True:
        try:
            kc.get_iopub_msg(timeout=0)
        except queue.Empty:
            break
    msg_id = kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=False)
    deadline = time.monotonic() + timeout
    interrupted = None
    sent = {"stdout": 0, "stderr": 0}
    images = 0
    dropped = {"text": 0, "images": 0}
    while True:
        now = time.monotonic()
        if interrupted is None and (now > deadline or client_gone(conn, select, gone)):
            km.interrupt_kernel()
            interrupted = now
        elif interrupted is not None and now - interrupted > 5:
            st["lost"] = "the Python kernel did not stop on interrupt and was restarted"
            w({"t": "note", "text": "the code did not stop on interrupt within 5 s, so the kernel was stopped; its variables are lost"})
            stop()
            break
        try:
            msg = kc.get_iopub_msg(timeout=0.05)
        except queue.Empty:
            if not km.is_alive():
                code_ = km.provisioner.process.returncode if km.provisioner and km.provisioner.process else None
                st["lost"] = "the Python kernel exited (exit status %s) during an earlier call" % code_
                w({"t": "died", "exit_status": code_})
                stop()
                break
            continue
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        t, c = msg["msg_type"], msg["content"]
        if t == "stream":
            name = "stderr" if c.get("name") == "stderr" else "stdout"
            text = c.get("text", "")
            room = max_text - sent[name]
            if room > 0:
                w({"t": "stream", "name": name, "text": text[:room]})
            if len(text) > room:
                dropped["text"] += len(text) - max(room, 0)
            sent[name] += len(text)
        elif t in ("display_data", "execute_result"):
            data, keep = c.get("data", {}), {}
            for mime in ("image/png", "image/jpeg"):
                v = data.get(mime)
                if isinstance(v, str):
                    if images >= max_images or len(v) * 3 // 4 > max_image:
                        dropped["images"] += 1
                    else:
                        keep[mime] = v
                        images += 1
                    break
            for mime in ("text/plain", "text/html"):
                v = data.get(mime)
                if isinstance(v, str):
                    keep[mime] = v[:max_text]
            if keep:
                w({"t": "display", "data": keep})
        elif t == "error" and c.get("ename") == "SystemExit":
            w({"t": "exit", "code": c.get("evalue", "")})
        elif t == "error":
            w({"t": "error", "ename": c.get("ename", ""), "evalue": c.get("evalue", ""), "traceback": c.get("traceback", [])[:50]})
        elif t == "status" and c.get("execution_state") == "idle":
            break
    w({"t": "done", "timed_out": interrupted is not None and not gone[0], "stdout_chars": sent["stdout"], "stderr_chars": sent["stderr"], "dropped": dropped})


def client_gone(conn, select, gone):
    if gone[0]:
        return True
    r, _, _ = select.select([conn], [], [], 0)
    if r:
        try:
            if conn.recv(1, socket.MSG_PEEK) == b"":
                gone[0] = True
        except OSError:
            gone[0] = True
    return gone[0]


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    else:
        call(sys.argv[2])

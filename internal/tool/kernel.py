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
#
# Client tools (programmatic tool calling): a call whose request names
# "tools" gets each as an async function in the kernel's namespace. Calling
# one (or several together, asyncio.gather) makes the kernel ask for input
# (Jupyter's stdin channel, as input() does); the driver answers the client
# with {"t":"tool_call","call":TOKEN,"name","input"} per call and
# {"t":"paused"} and keeps the execution parked in the kernel, waiting. A
# later call {"resume":true,"answers":[{"call":TOKEN,"result"|"error"}]}
# hands the answers to the waiting code and streams the execution on (the
# output of the earlier stretches first): it may call another tool, or end
# with "done". A parked execution waits at most PARK_S seconds (the call's
# "park_s"); then, or
# when another call comes, it is ended (the tool raises ToolError) and a
# resume for it gets {"t":"expired","why"}.
import base64, json, os, socket, sys, time

D = "/tmp/.shellgate-kernel"
SOCK = D + "/sock"
HOME = "/workspace/home"
PARK_S = 300
MAX_TOOL_INPUT = 256 << 10
MAX_BATCH = 32
TOOL_PROMPT = "\x1eshellgate-tool "

# Run silently in a new kernel: an interrupt stops code that awaits (an
# asynchronous cell, as code calling tools is). ipykernel 6.17 turns SIGINT
# in such a cell into a callback on a loop that does not run it, so the
# cell never stops and the kernel had to be killed. Here SIGINT cancels the
# cell at its await (CancelledError) or, when it lands in the cell's own
# code (a busy loop, time.sleep), raises Interrupted there: an Exception,
# since a KeyboardInterrupt would escape the task and end the event loop.
ASYNC_INTERRUPT = r"""
def _shellgate_async_interrupt():
    import asyncio, contextlib, os, signal, tempfile
    cells = os.path.join(tempfile.gettempdir(), "ipykernel_")

    class Interrupted(Exception):
        "The code was interrupted (its timeout) while running code that awaits."

    @contextlib.contextmanager
    def cancel_on_sigint(future):
        loop = asyncio.get_event_loop()

        def handle(signum, frame):
            if frame is not None and frame.f_code.co_filename.startswith(cells):
                raise Interrupted("interrupted")
            loop.call_soon_threadsafe(lambda: future.done() or future.cancel())

        save = signal.signal(signal.SIGINT, handle)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, save)

    get_ipython().kernel._cancel_on_sigint = cancel_on_sigint


_shellgate_async_interrupt()
del _shellgate_async_interrupt
"""

# Run silently in the kernel before a call with tools: defines the tool
# functions. The answer to the input request is JSON: {"result": text} or
# {"error": text}.
TOOLS_SETUP = r"""
def _shellgate_tools(allowed, denied, caller, stale, params):
    import asyncio, builtins, json, keyword
    ns = get_ipython().user_ns

    class ToolError(Exception):
        "A client tool's call failed: the tool reported an error, or its result never came."

    # Calls started together (asyncio.gather) go to the client together:
    # the first schedules flush, which runs once every task started has
    # made its call, and waits for all their results at once.
    pending = []

    def flush():
        batch = pending[:]
        del pending[:]
        try:
            reply = json.loads(builtins.input("\x1eshellgate-tool " + json.dumps([{"name": n, "input": i} for n, i, f in batch])))
        except BaseException as e:
            for n, i, f in batch:
                if not f.done():
                    f.set_exception(e if isinstance(e, Exception) else ToolError("the call was interrupted"))
            return
        if not isinstance(reply, list):
            reply = [reply] * len(batch)
        for (n, i, f), r in zip(batch, reply):
            if f.done():
                continue
            if "error" in r:
                f.set_exception(ToolError(r["error"]))
            else:
                f.set_result(r.get("result", ""))

    def make(name):
        names = params.get(name) or []

        async def tool(*args, **kwargs):
            # Positional arguments fill the input schema's properties in
            # their order.
            if len(args) > len(names):
                raise TypeError("%s() takes at most %d positional argument(s) (%s); pass the input as keyword arguments" % (name, len(names), ", ".join(names)))
            for k, v in zip(names, args):
                if k in kwargs:
                    raise TypeError("%s() got multiple values for argument %r" % (name, k))
                kwargs[k] = v
            json.dumps(kwargs)  # not JSON: the TypeError is the caller's
            loop = asyncio.get_running_loop()
            f = loop.create_future()
            pending.append((name, kwargs, f))
            if len(pending) == 1:
                loop.call_soon(flush)
            return await f
        tool.__name__ = tool.__qualname__ = name
        tool.__doc__ = "The client tool %s: await %s(%s) returns its result as a string." % (name, name, ", ".join(names) or "key=value, ...")
        return tool

    def refuse(name):
        async def tool(*args, **kwargs):
            raise ToolError("the tool %s cannot be called from code: its allowed_callers do not include %s" % (name, caller))
        tool.__name__ = tool.__qualname__ = name
        return tool

    for n in stale:
        if getattr(ns.get(n), "_shellgate_tool", False):
            del ns[n]
    for n, mk in [(n, make) for n in allowed] + [(n, refuse) for n in denied]:
        if n.isidentifier() and not keyword.iskeyword(n):
            f = mk(n)
            f._shellgate_tool = True
            ns[n] = f
    ns["ToolError"] = ToolError
"""


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
    st = {"km": None, "kc": None, "lost": None, "parked": None, "ended": {}, "tools": []}

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
        kc.execute_interactive(ASYNC_INTERRUPT, silent=True, store_history=False, timeout=60, output_hook=lambda m: None)
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

    # accept wakes now and then to end a parked execution that waited too
    # long.
    srv.settimeout(2)
    while True:
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            x = st["parked"]
            if x is not None and time.monotonic() - x["parked_at"] > x["park_s"]:
                try:
                    end_parked(st, stop, queue, "the execution waited more than %d s for the result of %s and was ended" % (x["park_s"], x["name"]), True)
                except Exception:
                    st["parked"] = None
            continue
        conn.settimeout(None)
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
    timeout = max(0.001, req.get("timeout_ms", 120000) / 1000.0)

    gone = [False]

    def w(obj):
        if gone[0]:
            return
        try:
            conn.sendall((json.dumps(obj) + "\n").encode())
        except OSError:
            gone[0] = True

    parked = st["parked"]
    if "resume" in req:
        # A client tool's result for a parked execution.
        answers = req.get("answers") if isinstance(req.get("answers"), list) else []
        tokens = [a.get("call") for a in answers if isinstance(a, dict)]
        if parked is None or sorted(tokens) != sorted(parked["calls"]):
            why, waited = next((st["ended"][t] for t in tokens if t in st["ended"]), (None, False))
            if why is None and parked is not None and set(tokens) & set(parked["calls"]):
                why = "the results of all the calls the execution waits for must come together (%d calls, %d results)" % (len(parked["calls"]), len(tokens))
            w({"t": "expired", "why": why or "no execution of this container's kernel is waiting for that tool result (it ended, or the container slept since it was paused)", "waited": waited})
            return
        if time.monotonic() - parked["parked_at"] > parked["park_s"]:
            why = "the execution waited more than %d s for the result of %s and was ended" % (parked["park_s"], parked["name"])
            end_parked(st, stop, queue, why, True)
            w({"t": "expired", "why": why, "waited": True})
            return
        st["parked"] = None
        km, kc = st["km"], st["kc"]
        if not km.is_alive():
            st["lost"] = "the Python kernel exited while an execution waited for a tool result"
            stop()
            w({"t": "expired", "why": "the Python kernel exited while the execution waited for the tool result"})
            return
        x = parked
        by = {a["call"]: a for a in answers}
        kc.input(json.dumps([{"error": str(by[t]["error"])} if "error" in by[t] else {"result": str(by[t].get("result", ""))} for t in x["calls"]]))
        for line in x["lines"]:
            w(line)
    else:
        if parked is not None:
            end_parked(st, stop, queue, "the execution was ended while it waited for the result of %s: another Python call came to the container's kernel" % parked["name"])
        km = st["km"]
        if km is not None and not km.is_alive():
            st["lost"] = "the Python kernel exited (exit status %s)" % km.provisioner.process.returncode if getattr(km, "provisioner", None) and km.provisioner.process else "the Python kernel exited"
            stop()
        if st["km"] is None:
            lost = st["lost"]
            start(w)
            w({"t": "restarted", "why": lost} if lost else {"t": "started"})
            st["lost"] = None
            st["tools"] = []
        km, kc = st["km"], st["kc"]
        # Drain what an earlier, interrupted call left on iopub.
        while True:
            try:
                kc.get_iopub_msg(timeout=0)
            except queue.Empty:
                break
        tools = [n for n in req.get("tools") or [] if isinstance(n, str)]
        denied = [n for n in req.get("denied") or [] if isinstance(n, str)]
        if tools or denied or st["tools"]:
            params = req.get("params") if isinstance(req.get("params"), dict) else {}
            kc.execute_interactive(TOOLS_SETUP + "\n_shellgate_tools(%s, %s, %s, %s, %s)\ndel _shellgate_tools\n" % (
                json.dumps(tools), json.dumps(denied), json.dumps(str(req.get("caller", ""))), json.dumps(st["tools"]), json.dumps(params)),
                silent=True, store_history=False, timeout=60, output_hook=lambda m: None)
            st["tools"] = tools + denied
        x = {
            "tools": tools, "lines": [], "park_s": float(req.get("park_s", PARK_S)),
            "msg_id": kc.execute(req["code"], store_history=True, allow_stdin=bool(tools), stop_on_error=False),
            "max_text": int(req.get("max_text", 16384)), "max_images": int(req.get("max_images", 4)),
            "max_image": int(req.get("max_image_bytes", 2 << 20)),
            "sent": {"stdout": 0, "stderr": 0}, "images": 0, "dropped": {"text": 0, "images": 0},
        }
    run(conn, st, stop, queue, select, x, timeout, w, gone)


def run(conn, st, stop, queue, select, x, timeout, w, gone):
    """Streams execution x until it ends, or until it calls a client tool
    (then it is parked in st and the client is told)."""
    km, kc = st["km"], st["kc"]
    msg_id, sent, dropped = x["msg_id"], x["sent"], x["dropped"]

    def out(obj):
        # The output of an execution that may pause is kept, to be sent
        # again to the client that resumes it last.
        if x["tools"]:
            x["lines"].append(obj)
        w(obj)

    deadline = time.monotonic() + timeout
    interrupted = None
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
        if x["tools"]:
            try:
                req = kc.get_stdin_msg(timeout=0)
            except queue.Empty:
                req = None
            if req is not None and req.get("msg_type") == "input_request":
                calls = tool_request(req.get("content", {}).get("prompt", ""), x["tools"])
                if calls == "":
                    kc.input("")
                    out({"t": "note", "text": "input() has no one to read from here; it returned an empty string"})
                    continue
                if isinstance(calls, str):
                    kc.input(json.dumps({"error": calls}))
                    continue
                if isinstance(calls[0], str):
                    kc.input(json.dumps([{"error": why} for why in calls]))
                    continue
                if interrupted is not None:
                    kc.input(json.dumps({"error": "the execution is being interrupted"}))
                    continue
                x["calls"] = [os.urandom(12).hex() for _ in calls]
                x["name"], x["parked_at"] = ", ".join(sorted({c["name"] for c in calls})), time.monotonic()
                st["parked"] = x
                for token, c in zip(x["calls"], calls):
                    w({"t": "tool_call", "call": token, "name": c["name"], "input": c["input"]})
                w({"t": "paused"})
                return
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
            room = x["max_text"] - sent[name]
            if room > 0:
                out({"t": "stream", "name": name, "text": text[:room]})
            if len(text) > room:
                dropped["text"] += len(text) - max(room, 0)
            sent[name] += len(text)
        elif t in ("display_data", "execute_result"):
            data, keep = c.get("data", {}), {}
            for mime in ("image/png", "image/jpeg"):
                v = data.get(mime)
                if isinstance(v, str):
                    if x["images"] >= x["max_images"] or len(v) * 3 // 4 > x["max_image"]:
                        dropped["images"] += 1
                    else:
                        keep[mime] = v
                        x["images"] += 1
                    break
            for mime in ("text/plain", "text/html"):
                v = data.get(mime)
                if isinstance(v, str):
                    keep[mime] = v[:x["max_text"]]
            if keep:
                out({"t": "display", "data": keep})
        elif t == "error" and c.get("ename") == "SystemExit":
            out({"t": "exit", "code": c.get("evalue", "")})
        elif t == "error":
            out({"t": "error", "ename": c.get("ename", ""), "evalue": c.get("evalue", ""), "traceback": c.get("traceback", [])[:50]})
        elif t == "status" and c.get("execution_state") == "idle":
            break
    w({"t": "done", "timed_out": interrupted is not None and not gone[0], "stdout_chars": sent["stdout"], "stderr_chars": sent["stderr"], "dropped": dropped})


def tool_request(prompt, allowed):
    """The calls an input request asks for: [{"name","input"}]; or, for
    each, why it is refused (a list of strings, one per call, or one string
    for the request); or "" for an input() that is not a tool call."""
    if not isinstance(prompt, str) or not prompt.startswith(TOOL_PROMPT):
        return ""
    if len(prompt) > MAX_TOOL_INPUT * 4 + 1024:
        return "the tool calls' input is over %d bytes of JSON" % (MAX_TOOL_INPUT * 4)
    try:
        calls = json.loads(prompt[len(TOOL_PROMPT):])
    except ValueError as e:
        return "the tool call is not valid JSON: %s" % e
    if not isinstance(calls, list) or not calls or len(calls) > MAX_BATCH:
        return "a batch of 1 to %d tool calls is expected" % MAX_BATCH
    why = []
    for c in calls:
        name, inp = (c.get("name"), c.get("input")) if isinstance(c, dict) else (None, None)
        if name not in allowed:
            why.append("there is no tool %r callable from code in this request (callable: %s)" % (name, ", ".join(allowed) or "none"))
        elif not isinstance(inp, dict):
            why.append("a tool's input must be keyword arguments (a JSON object)")
        elif len(json.dumps(inp)) > MAX_TOOL_INPUT:
            why.append("the input of %s is over %d bytes of JSON" % (name, MAX_TOOL_INPUT))
        else:
            why.append(None)
    if any(why):
        return [w or "not called: another call made with it was refused" for w in why]
    return [{"name": c["name"], "input": c["input"]} for c in calls]


def end_parked(st, stop, queue, why, waited=False):
    """Ends the parked execution: its tool call raises ToolError(why), and
    the execution runs to its end (interrupted after 5 s; the kernel is
    stopped if it does not stop then). waited: it was ended for waiting
    longer than its limit (an expired answer says so)."""
    x, km, kc = st["parked"], st["km"], st["kc"]
    st["parked"] = None
    for t in x["calls"]:
        st["ended"][t] = (why, waited)
    while len(st["ended"]) > 16:
        del st["ended"][next(iter(st["ended"]))]
    if km is None or not km.is_alive():
        return
    err = json.dumps({"error": why})
    kc.input(err)
    t0, interrupted = time.monotonic(), False
    while True:
        now = time.monotonic()
        if not interrupted and now - t0 > 5:
            km.interrupt_kernel()
            interrupted = True
        elif interrupted and now - t0 > 10:
            st["lost"] = "the Python kernel did not stop on interrupt and was restarted"
            stop()
            return
        try:
            req = kc.get_stdin_msg(timeout=0)
            kc.input(err)
        except queue.Empty:
            pass
        try:
            msg = kc.get_iopub_msg(timeout=0.05)
        except queue.Empty:
            if not km.is_alive():
                st["lost"] = "the Python kernel exited"
                stop()
                return
            continue
        if msg.get("parent_header", {}).get("msg_id") == x["msg_id"] and msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
            return


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

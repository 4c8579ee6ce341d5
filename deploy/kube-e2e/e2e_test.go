//go:build kube_e2e

// The end-to-end steps of make kube-e2e (deploy/kube-e2e/run.sh), against
// the real single-node cluster cluster.sh started: deploy/kubernetes/ as
// a user applies it, two gateway replicas on PostgreSQL and S3
// (versitygw), both on this host and reached from the pods through
// NODE_IP, the scripted upstream as the model, sandbox pods under gVisor.
// Each step is a subtest "NN ..."; run.sh counts them. Steps depend on
// the first (the deployment); the others are independent of each other.
//
//	KUBECONFIG=... KUBE_E2E_NODE_IP=10.250.0.1 SHELLGATE_BIN=bin/shellgate \
//	  go test -tags kube_e2e -count=1 -v -run TestKubeE2E ./deploy/kube-e2e/
package kubee2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/shellgate/shellgate/internal/gateway/scripted"
	"github.com/shellgate/shellgate/internal/store/pgtest"
	"github.com/shellgate/shellgate/sandbox/kube"
	"github.com/shellgate/shellgate/sandbox/s3store/s3test"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

const ns = "shellgate"

// cluster is what the steps share.
type cluster struct {
	kubeconfig, nodeIP, bin, repo string
	cs                            *kubernetes.Clientset
	hostDSN, podDSN               string
	replicas                      []string // the gateway pods' base URLs
	service                       string   // the gateway Service's base URL
	key                           string
}

func TestKubeE2E(t *testing.T) {
	c := &cluster{kubeconfig: os.Getenv("KUBECONFIG"), nodeIP: os.Getenv("KUBE_E2E_NODE_IP"), bin: os.Getenv("SHELLGATE_BIN")}
	if c.kubeconfig == "" || c.nodeIP == "" || c.bin == "" {
		t.Fatal("run through make kube-e2e (KUBECONFIG, KUBE_E2E_NODE_IP and SHELLGATE_BIN unset)")
	}
	wd, _ := os.Getwd()
	c.repo = filepath.Join(wd, "..", "..")
	rc, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if c.cs, err = kubernetes.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}

	// The host's services, reached from the pods at NODE_IP.
	pg := pgtest.Shared(t)
	c.hostDSN = pg.NewDatabase(t)
	c.podDSN = c.forwarded(t, c.hostDSN)
	s3 := s3test.Shared(t)
	bucket := s3.NewBucket(t)
	s3URL := c.forwardAddr(t, strings.TrimPrefix(s3.Endpoint, "http://"))
	cmdArgs, _ := json.Marshal(map[string]any{"commands": []string{"id -u", "dmesg | head -1"}})
	model := scripted.NewServer(&scripted.Script{Repeat: true, Turns: []scripted.Turn{
		{Text: "Let me look.", ToolCalls: []scripted.ToolCall{{Name: "shell", Arguments: cmdArgs}}},
		{Text: "The sandbox says: {{last_tool_stdout}}"},
	}})
	t.Cleanup(model.Close)
	modelURL := c.forwardAddr(t, strings.TrimPrefix(model.URL, "http://"))
	inet := startInternet(t)

	step := func(name string, f func(t *testing.T)) bool { return t.Run(name, f) }
	if !step("01 deploy/kubernetes applied, two gateway replicas on PostgreSQL and S3 ready", func(t *testing.T) {
		c.deploy(t, fmt.Sprintf(`runtime:
  backend: kubernetes
  namespace: shellgate
  image: shellgate-sandbox:dev
  runtime_class: gvisor
  ready_timeout: 2m
  egress_proxy: {namespace: shellgate, service: shellgate-egress, port: 3128}
providers:
  e2e: {api: responses, base_url: http://%s/v1, models: [m]}
`, modelURL), map[string]string{
			"SHELLGATE_DATABASE":    c.podDSN,
			"SHELLGATE_STORAGE":     fmt.Sprintf("s3://%s/e2e/?endpoint=http://%s&region=us-east-1", bucket.Bucket, s3URL),
			"AWS_ACCESS_KEY_ID":     bucket.AccessKey,
			"AWS_SECRET_ACCESS_KEY": bucket.SecretKey,
		}, inet)
	}) {
		t.FailNow()
	}

	step("02 RBAC: serve's start-up check passes with 02-rbac.yaml and names what is missing without it", c.rbac)

	step("03 a Responses request's shell call runs in a pod under gVisor", func(t *testing.T) {
		cl := openai.NewClient(option.WithBaseURL(c.service+"/v1"), option.WithAPIKey(c.key), option.WithMaxRetries(0))
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		r, err := cl.Responses.New(ctx, responses.ResponseNewParams{Model: "e2e/m",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Who runs my commands?")}},
			option.WithJSONSet("tools", []any{map[string]any{"type": "shell", "environment": map[string]any{"type": "container_auto"}}}))
		if err != nil {
			t.Fatal(err)
		}
		var out, cid string
		for _, it := range r.Output {
			if it.Type == "shell_call_output" {
				for _, o := range it.AsShellCallOutput().Output {
					out += o.Stdout
				}
			}
			if it.Type == "shell_call" {
				cid = it.AsShellCall().Environment.ContainerID
			}
		}
		if !strings.HasPrefix(out, "1000\n") || !strings.Contains(out, "gVisor") || !strings.Contains(r.OutputText(), "gVisor") {
			t.Fatalf("output %q, answer %q", out, r.OutputText())
		}
		c.deleteAtEnd(t, c.service, cid)
		pod := c.sandboxPod(t, cid)
		if pod == nil || pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != "gvisor" {
			t.Fatalf("container %s: pod %+v", cid, pod)
		}
	})

	step("04 files uploaded, listed and downloaded", func(t *testing.T) {
		c.create(t, c.service, "files", nil)
		payload := bytes.Repeat([]byte("region,revenue\nnorth,37.5\n"), 40000) // ~1 MB
		var f struct{ ID, Path string }
		c.must(t, c.upload(t, c.service, "files", "data/sales.csv", payload), &f)
		if f.Path != "/workspace/home/data/sales.csv" && f.Path != "data/sales.csv" {
			t.Logf("uploaded as %q", f.Path)
		}
		var l struct {
			Data []struct{ ID, Path string }
		}
		c.must(t, c.call(t, "GET", c.service+"/api/v1/containers/files/files", nil), &l)
		found := false
		for _, d := range l.Data {
			found = found || d.ID == f.ID
		}
		if !found {
			t.Fatalf("list %+v lacks %s", l, f.ID)
		}
		got := c.call(t, "GET", c.service+"/api/v1/containers/files/files/"+f.ID+"/content", nil)
		if got.st != 200 || !bytes.Equal(got.body, payload) {
			t.Fatalf("download: %d, %d bytes (want %d)", got.st, len(got.body), len(payload))
		}
		if out := c.exec(t, c.service, "files", "wc -c < data/sales.csv"); strings.TrimSpace(out) != fmt.Sprint(len(payload)) {
			t.Fatalf("in the sandbox: %q", out)
		}
	})

	step("05 asleep through replica A (home archived, pod deleted), awake through replica B with its files", func(t *testing.T) {
		a, b := c.replicas[0], c.replicas[1]
		id := c.create(t, a, "sleeper", nil)
		c.exec(t, a, "sleeper", "echo kept > note.txt")
		if r := c.call(t, "POST", a+"/api/v1/containers/sleeper/sleep", nil); r.st != 200 {
			t.Fatalf("sleep: %d %s", r.st, r.body)
		}
		if p := c.sandboxPod(t, id); p != nil && p.DeletionTimestamp == nil {
			t.Fatalf("the pod %s is still there asleep", p.Name)
		}
		var ctr struct{ Status string }
		c.must(t, c.call(t, "GET", b+"/api/v1/containers/sleeper", nil), &ctr)
		if ctr.Status != "sleeping" {
			t.Fatalf("B says %q", ctr.Status)
		}
		if out := c.exec(t, b, "sleeper", "cat note.txt"); out != "kept\n" {
			t.Fatalf("after the wake through B: %q", out)
		}
	})

	step("06 concurrent calls to one container through both replicas all succeed, in order", func(t *testing.T) {
		a, b := c.replicas[0], c.replicas[1]
		c.create(t, a, "shared", nil)
		c.exec(t, a, "shared", "true")
		var wg sync.WaitGroup
		errs := make(chan string, 8)
		run := func(base, cmd string) {
			defer wg.Done()
			if r := c.call(t, "POST", base+"/api/v1/containers/shared/exec", map[string]any{"commands": []string{cmd}}); r.st != 200 {
				errs <- fmt.Sprintf("%s %q: %d %s", base, cmd, r.st, r.body)
			}
		}
		wg.Add(1)
		go run(a, "sleep 2; echo a >> order")
		time.Sleep(500 * time.Millisecond) // A's command is running
		wg.Add(1)
		go run(b, "echo b >> order")
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		if out := c.exec(t, b, "shared", "cat order"); out != "a\nb\n" {
			t.Fatalf("order %q", out)
		}
	})

	step("07 the egress proxy DaemonSet lets an allowlisted name through and refuses others", func(t *testing.T) {
		c.create(t, c.service, "egress", map[string]any{"network_policy": map[string]any{"type": "allowlist", "allowed_domains": []string{"allowed.e2e.test"}}})
		get := `python3 -c "import urllib.request,sys
try: print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode().strip())
except Exception as e: print('refused:', e)" `
		if out := c.exec(t, c.service, "egress", get+"http://allowed.e2e.test/"); strings.TrimSpace(out) != inet.token {
			t.Fatalf("allowed name: %q", out)
		}
		if out := c.exec(t, c.service, "egress", get+"http://denied.e2e.test/"); !strings.Contains(out, "refused") || strings.Contains(out, inet.token) {
			t.Fatalf("denied name: %q", out)
		}
	})

	step("08 NetworkPolicy is enforced (kube-router): a sandbox without network reaches neither the test internet nor another sandbox's agent", func(t *testing.T) {
		if r := c.try("http://" + inet.addr + "/"); r.st != 200 {
			t.Fatalf("this host cannot reach the test internet (%d %s): the check below would prove nothing", r.st, r.body)
		}
		c.create(t, c.service, "nonet", nil)
		other := c.create(t, c.service, "neighbour", nil)
		c.exec(t, c.service, "neighbour", "true")
		pod := c.sandboxPod(t, other)
		if pod == nil || pod.Status.PodIP == "" {
			t.Fatal("no neighbour pod")
		}
		dial := `python3 -c "import socket,sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); print('connected')
except Exception as e: print('refused:', e)" `
		// Both are reachable from the pod network: the egress proxy's pod
		// reaches the test internet (step 07), the gateways' pods every
		// agent's port.
		for _, target := range []string{inet.addr + " 80", pod.Status.PodIP + " 7070"} {
			if out := c.exec(t, c.service, "nonet", dial+target); !strings.HasPrefix(out, "refused") {
				t.Errorf("a sandbox without network reached %s: %q", target, out)
			}
		}
	})

	step("09 a pod killed mid-command answers Restarted, and the next call works", func(t *testing.T) {
		id := c.create(t, c.service, "killed", nil)
		c.exec(t, c.service, "killed", "echo before > f")
		pod := c.sandboxPod(t, id)
		if pod == nil {
			t.Fatal("no pod")
		}
		done := make(chan reply, 1)
		go func() {
			done <- c.call(t, "POST", c.service+"/api/v1/containers/killed/exec", map[string]any{"commands": []string{"sleep 60"}})
		}()
		time.Sleep(2 * time.Second)
		zero := int64(0)
		if err := c.cs.CoreV1().Pods(ns).Delete(t.Context(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		var r reply
		select {
		case r = <-done:
		case <-time.After(90 * time.Second):
			t.Fatal("the command did not end after its pod was deleted")
		}
		var res struct {
			Output []struct {
				Stderr  string
				Outcome struct {
					ExitCode int `json:"exit_code"`
				}
			}
		}
		c.must(t, r, &res)
		if len(res.Output) != 1 || res.Output[0].Outcome.ExitCode != 137 || !strings.Contains(res.Output[0].Stderr, "the next command runs in a new pod") {
			t.Fatalf("%s", r.body)
		}
		if out := c.exec(t, c.service, "killed", "echo after"); out != "after\n" {
			t.Fatalf("next call: %q", out)
		}
	})

	step("10 an idle pod sleeps after --idle-sleep (home archived, pod deleted) and wakes with its home", func(t *testing.T) {
		id := c.create(t, c.service, "idle", nil)
		c.exec(t, c.service, "idle", "echo idle > f")
		for deadline := time.Now().Add(90 * time.Second); c.sandboxPod(t, id) != nil; time.Sleep(time.Second) {
			if time.Now().After(deadline) {
				t.Fatal("the pod is still there 90 s after its last command (--idle-sleep=20s)")
			}
		}
		var ctr struct{ Status string }
		c.must(t, c.call(t, "GET", c.service+"/api/v1/containers/idle", nil), &ctr)
		if ctr.Status != "sleeping" {
			t.Fatalf("status %q", ctr.Status)
		}
		if out := c.exec(t, c.service, "idle", "cat f"); out != "idle\n" {
			t.Fatalf("after the wake: %q", out)
		}
	})

	step("11 benchmarks: the cluster beside this machine's own sandboxes", c.bench)
}

// bench measures, side by side in one run, what a user waits for on this
// cluster and on this machine's own sandboxes (a local `shellgate serve`,
// gVisor, the same image): a new container's first command, a warm
// command, the first command after a sleep, and an idle sandbox's memory
// (its cgroup's usage: the pod's, or the local sandbox's). Neither side
// has a warm pool (the local default keeps one sandbox started). It writes the
// table to KUBE_E2E_CACHE/logs/bench.txt and logs it; it asserts nothing
// about timings.
func (c *cluster) bench(t *testing.T) {
	const rounds = 5
	local := c.localServe(t)
	type side struct {
		name, base, key string
		mem             func(t *testing.T, id string) int64
	}
	sides := []side{
		{"kubernetes (pod, gVisor)", c.service, c.key, c.podMemory},
		{"this machine (runsc, no warm pool)", local.base, local.key, local.memory},
	}
	type result struct {
		first, warm, wake []time.Duration
		mem               []int64
	}
	res := make([]result, len(sides))
	timed := func(f func()) time.Duration { s := time.Now(); f(); return time.Since(s) }
	for r := 0; r < rounds; r++ {
		for i, sd := range sides {
			cc := *c
			cc.key = sd.key
			name := fmt.Sprintf("bench-%d", r)
			var id string
			res[i].first = append(res[i].first, timed(func() {
				id = cc.create(t, sd.base, name, nil)
				cc.exec(t, sd.base, name, "true")
			}))
			for w := 0; w < 3; w++ {
				res[i].warm = append(res[i].warm, timed(func() { cc.exec(t, sd.base, name, "true") }))
			}
			time.Sleep(time.Second) // idle
			res[i].mem = append(res[i].mem, sd.mem(t, id))
			cc.must(t, cc.call(t, "POST", sd.base+"/api/v1/containers/"+name+"/sleep", nil), nil)
			res[i].wake = append(res[i].wake, timed(func() { cc.exec(t, sd.base, name, "true") }))
			cc.must(t, cc.call(t, "DELETE", sd.base+"/api/v1/containers/"+name, nil), nil) // one awake sandbox per side at a time
		}
	}
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	medi := func(d []int64) int64 { slices.Sort(d); return d[len(d)/2] }
	var b strings.Builder
	fmt.Fprintf(&b, "| median of %d | %s | %s | ratio |\n|---|---|---|---|\n", rounds, sides[0].name, sides[1].name)
	row := func(what string, k, l time.Duration) {
		fmt.Fprintf(&b, "| %s | %.2f s | %.2f s | %.1f× |\n", what, k.Seconds(), l.Seconds(), k.Seconds()/l.Seconds())
	}
	row("new container, first command", med(res[0].first), med(res[1].first))
	row("warm command (`true`)", med(res[0].warm), med(res[1].warm))
	row("first command after sleep (wake)", med(res[0].wake), med(res[1].wake))
	km, lm := medi(res[0].mem), medi(res[1].mem)
	fmt.Fprintf(&b, "| idle sandbox memory (cgroup usage) | %d MiB | %d MiB | %.1f× |\n", km>>20, lm>>20, float64(km)/float64(lm))
	t.Logf("\n%s", b.String())
	os.WriteFile(filepath.Join(os.Getenv("KUBE_E2E_CACHE"), "logs", "bench.txt"), []byte(b.String()), 0o644)
}

// podMemory is the memory cgroup usage of container id's pod (all its
// containers: the pause container and the sandbox with gVisor's sentry).
func (c *cluster) podMemory(t *testing.T, id string) int64 {
	p := c.sandboxPod(t, id)
	if p == nil {
		t.Fatalf("no pod for %s", id)
	}
	var dirs []string // kubepods/pod<uid>, or kubepods/<qos>/pod<uid>
	filepath.WalkDir("/sys/fs/cgroup/memory/shellgate-kube-e2e", func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "pod"+string(p.UID) {
			dirs = append(dirs, path)
		}
		return nil
	})
	if len(dirs) != 1 {
		t.Fatalf("pod %s's memory cgroup: %v", p.UID, dirs)
	}
	return readInt(t, filepath.Join(dirs[0], "memory.usage_in_bytes"))
}

func readInt(t *testing.T, path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	fmt.Sscan(string(b), &n)
	return n
}

// localSide is a `shellgate serve` on this machine with its own sandboxes.
type localSide struct {
	base, key, data string
}

func (c *cluster) localServe(t *testing.T) *localSide {
	data := sandboxtest.DataDirWithImages(t)
	out, err := exec.Command(c.bin, "keys", "create", "--data-dir", data, "--account", "e2e", "--workspace", "w").Output()
	if err != nil {
		t.Fatalf("keys create: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	// No warm pool: the pods have none either (and a pooled sandbox would
	// be a second awake sandbox beside the container's).
	cmd := exec.Command(c.bin, "serve", "--addr", addr, "--data-dir", data, "--runtime", "runsc", "--image", "default", "--pool", "0")
	cmd.Env = append(os.Environ(), "SHELLGATE_AGENT="+filepath.Join(filepath.Dir(c.bin), "shellgate-agent"))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	l := &localSide{base: "http://" + addr, key: lastLine(string(out)), data: data}
	for deadline := time.Now().Add(time.Minute); c.try(l.base+"/healthz").st != 200; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("local serve did not start:\n%s", log.String())
		}
	}
	return l
}

// memory is the memory cgroup usage of the local server's one awake
// sandbox: the cgroup of the runsc processes whose state is under its data
// directory (the runtime's ids are random, not the container's, and other
// work on this machine may start sandboxes meanwhile).
func (l *localSide) memory(t *testing.T, _ string) int64 {
	cgroups := map[string]bool{}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmd, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(cmd, []byte("runsc")) || !bytes.Contains(cmd, []byte(l.data)) {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cgroup"))
		for _, line := range strings.Split(string(cg), "\n") {
			if _, path, ok := strings.Cut(line, ":memory:"); ok && strings.HasPrefix(path, "/shellgate/") {
				cgroups[path] = true
			}
		}
	}
	if len(cgroups) != 1 {
		t.Fatalf("the local sandbox's memory cgroups: %v", cgroups)
	}
	for path := range cgroups {
		return readInt(t, filepath.Join("/sys/fs/cgroup/memory", path, "memory.usage_in_bytes"))
	}
	return 0
}

// deploy applies deploy/kubernetes/ with this cluster's additions: a
// PersistentVolume for the data claim (no provisioner here), the config,
// a Secret with the database and storage, two replicas, and the test
// internet's names for the egress proxy.
func (c *cluster) deploy(t *testing.T, config string, env map[string]string, inet *internet) {
	ctx := t.Context()
	data := filepath.Join(os.Getenv("KUBE_E2E_STATE"), "pv-data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(data, 1000, 1000)
	c.kubectl(t, "apply", "-f", filepath.Join(c.repo, "deploy/kubernetes"))
	c.apply(t, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: shellgate-e2e-data}
spec:
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  claimRef: {namespace: shellgate, name: shellgate-data}
  hostPath: {path: %s, type: Directory}
`, data))
	cm, err := c.cs.CoreV1().ConfigMaps(ns).Get(ctx, "shellgate-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["shellgate.yaml"] = config
	if _, err := c.cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "shellgate-e2e"}, StringData: env}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.kubectl(t, "-n", ns, "set", "env", "deploy/shellgate", "--from=secret/shellgate-e2e")
	c.kubectl(t, "-n", ns, "patch", "deploy/shellgate", "--type=json", "-p", // the operator lets the test internet's names be allowlisted
		`[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--network-allow=*.e2e.test"},`+
			`{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--idle-sleep=20s"}]`) // step 10 waits for it
	c.kubectl(t, "-n", ns, "scale", "deploy/shellgate", "--replicas=2")
	c.kubectl(t, "-n", ns, "patch", "ds/shellgate-egress", "--type=merge", "-p",
		fmt.Sprintf(`{"spec":{"template":{"spec":{"hostAliases":[{"ip":%q,"hostnames":["allowed.e2e.test","denied.e2e.test"]}]}}}}`, inet.addr))
	c.kubectl(t, "-n", ns, "rollout", "status", "deploy/shellgate", "--timeout=5m")
	c.kubectl(t, "-n", ns, "rollout", "status", "ds/shellgate-egress", "--timeout=3m")
	pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=shellgate"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning {
			c.replicas = append(c.replicas, "http://"+net.JoinHostPort(p.Status.PodIP, "8080"))
		}
	}
	if len(c.replicas) != 2 {
		t.Fatalf("gateway pods %v", c.replicas)
	}
	svc, err := c.cs.CoreV1().Services(ns).Get(ctx, "shellgate", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.service = "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "8080")
	out, err := exec.Command(c.bin, "keys", "create", "--database", c.hostDSN, "--account", "e2e", "--workspace", "w").CombinedOutput()
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	c.key = lines[len(lines)-1]
	// The Service answers once kube-proxy has its endpoints (until then
	// its rule refuses connections).
	for _, base := range append([]string{c.service}, c.replicas...) {
		var r reply
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			if r = c.try(base + "/healthz"); r.st == 200 || time.Now().After(deadline) {
				break
			}
		}
		if r.st != 200 || !bytes.Contains(r.body, []byte("kubernetes")) {
			t.Fatalf("%s/healthz: %d %s", base, r.st, r.body)
		}
	}
}

// rbac runs serve on this host as the gateway's service account (a token
// of it): with 02-rbac.yaml it starts; with its RoleBinding deleted it
// refuses to, naming what is missing.
func (c *cluster) rbac(t *testing.T) {
	tok := strings.TrimSpace(c.kubectl(t, "-n", ns, "create", "token", "shellgate", "--duration=10m"))
	dir := t.TempDir()
	server := strings.TrimSpace(c.kubectl(t, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"))
	kc := filepath.Join(dir, "kubeconfig")
	os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: sa, user: {token: %q}}]
contexts: [{name: e2e, context: {cluster: e2e, user: sa, namespace: shellgate}}]
current-context: e2e
`, server, tok)), 0o600)
	cfg := filepath.Join(dir, "shellgate.yaml")
	os.WriteFile(cfg, []byte("runtime:\n  backend: kubernetes\n  namespace: shellgate\n  image: shellgate-sandbox:dev\n  runtime_class: gvisor\n  kubeconfig: "+kc+"\n"), 0o600)
	serve := func() (healthy bool, out string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		var buf bytes.Buffer
		cmd := exec.Command(c.bin, "serve", "--addr", addr, "--data-dir", filepath.Join(dir, fmt.Sprint(time.Now().UnixNano())), "--config", cfg)
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		defer func() { cmd.Process.Kill(); <-exited }()
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
			select {
			case <-exited:
				return false, buf.String()
			case <-time.After(200 * time.Millisecond):
			}
			if r, err := http.Get("http://" + addr + "/healthz"); err == nil {
				r.Body.Close()
				if r.StatusCode == 200 {
					return true, buf.String()
				}
			}
		}
		return false, "timed out\n" + buf.String()
	}
	if ok, out := serve(); !ok {
		t.Fatalf("with 02-rbac.yaml serve did not start:\n%s", out)
	}
	c.kubectl(t, "-n", ns, "delete", "rolebinding", "shellgate-sandboxes")
	defer c.kubectl(t, "apply", "-f", filepath.Join(c.repo, "deploy/kubernetes/02-rbac.yaml"))
	ok, out := serve()
	if ok || !strings.Contains(out, "pods") {
		t.Fatalf("without the RoleBinding serve started (%v) or did not name the missing rights:\n%s", ok, out)
	}
	t.Logf("without the RoleBinding: %s", lastLine(out))
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}

func (c *cluster) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("kubectl", append([]string{"--kubeconfig", c.kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (c *cluster) apply(t *testing.T, manifest string) {
	t.Helper()
	cmd := exec.Command("kubectl", "--kubeconfig", c.kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

// sandboxPod is the pod of container id (cntr_…), or nil.
func (c *cluster) sandboxPod(t *testing.T, id string) *corev1.Pod {
	t.Helper()
	p, err := c.cs.CoreV1().Pods(ns).Get(t.Context(), kube.ObjectName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// reply is an HTTP answer.
type reply struct {
	st   int
	body []byte
}

func (c *cluster) call(t *testing.T, method, u string, body any) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, u, rd)
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	return c.do(t, req)
}

func (c *cluster) do(t *testing.T, req *http.Request) reply {
	t.Helper()
	cl := &http.Client{Timeout: 4 * time.Minute}
	r, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return reply{r.StatusCode, b}
}

// try is a GET that reports a failed connection as status 0.
func (c *cluster) try(u string) reply {
	cl := &http.Client{Timeout: 5 * time.Second}
	r, err := cl.Get(u)
	if err != nil {
		return reply{0, []byte(err.Error())}
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return reply{r.StatusCode, b}
}

func (c *cluster) must(t *testing.T, r reply, v any) {
	t.Helper()
	if r.st/100 != 2 {
		t.Fatalf("%d %s", r.st, r.body)
	}
	if v != nil {
		if err := json.Unmarshal(r.body, v); err != nil {
			t.Fatalf("%v: %s", err, r.body)
		}
	}
}

// create makes container name and returns its id.
func (c *cluster) create(t *testing.T, base, name string, extra map[string]any) string {
	t.Helper()
	body := map[string]any{"name": name}
	for k, v := range extra {
		body[k] = v
	}
	var ctr struct{ ID string }
	c.must(t, c.call(t, "POST", base+"/api/v1/containers", body), &ctr)
	c.deleteAtEnd(t, base, ctr.ID)
	return ctr.ID
}

// deleteAtEnd deletes container id when t ends: the node has room for a
// few sandbox pods only (2 cores, each pod asks 250m).
func (c *cluster) deleteAtEnd(t *testing.T, base, id string) {
	t.Cleanup(func() {
		req, _ := http.NewRequest("DELETE", base+"/api/v1/containers/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+c.key)
		if r, err := http.DefaultClient.Do(req); err == nil {
			r.Body.Close()
		}
	})
}

// exec runs one command and returns its stdout+stderr.
func (c *cluster) exec(t *testing.T, base, id, cmd string) string {
	t.Helper()
	var r struct {
		Output []struct{ Stdout, Stderr string }
	}
	c.must(t, c.call(t, "POST", base+"/api/v1/containers/"+id+"/exec", map[string]any{"commands": []string{cmd}}), &r)
	if len(r.Output) != 1 {
		t.Fatalf("output %+v", r)
	}
	return r.Output[0].Stdout + r.Output[0].Stderr
}

func (c *cluster) upload(t *testing.T, base, id, path string, data []byte) reply {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	w.WriteField("path", path)
	f, _ := w.CreateFormFile("file", filepath.Base(path))
	f.Write(data)
	w.Close()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/api/v1/containers/"+id+"/files", &b)
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", w.FormDataContentType())
	return c.do(t, req)
}

// forwardAddr relays NODE_IP:port (a new port) to addr on loopback, so
// that pods reach this host's test services; it returns NODE_IP:port.
func (c *cluster) forwardAddr(t *testing.T, addr string) string {
	ln, err := net.Listen("tcp", net.JoinHostPort(c.nodeIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { io.Copy(out, in); out.(*net.TCPConn).CloseWrite() }()
				io.Copy(in, out)
			}()
		}
	}()
	return ln.Addr().String()
}

// forwarded is dsn with its host relayed to NODE_IP.
func (c *cluster) forwarded(t *testing.T, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = c.forwardAddr(t, u.Host)
	return u.String()
}

// internet is an HTTP server on a public-looking address (TEST-NET-3) in
// a network namespace this test creates, reached from the host through a
// veth pair: the egress proxy refuses private addresses.
type internet struct {
	addr, token string
}

func startInternet(t *testing.T) *internet {
	const nsName, hostIf, nsIf = "sgk-e2e-inet", "sgk-inet0", "sgk-inet1"
	in := &internet{addr: "203.0.113.10", token: fmt.Sprintf("hello from the test internet %d", time.Now().UnixNano())}
	run := func(args ...string) {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	exec.Command("ip", "netns", "del", nsName).Run()
	run("ip", "netns", "add", nsName)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", nsName).Run()
		exec.Command("ip", "link", "del", hostIf).Run()
	})
	run("ip", "link", "add", hostIf, "type", "veth", "peer", "name", nsIf)
	run("ip", "link", "set", nsIf, "netns", nsName)
	run("ip", "addr", "add", "203.0.113.1/24", "dev", hostIf)
	run("ip", "link", "set", hostIf, "up")
	run("ip", "-n", nsName, "addr", "add", in.addr+"/24", "dev", nsIf)
	run("ip", "-n", nsName, "link", "set", nsIf, "up")
	run("ip", "-n", nsName, "link", "set", "lo", "up")
	run("ip", "-n", nsName, "route", "add", "default", "via", "203.0.113.1")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "index.html"), []byte(in.token+"\n"), 0o644)
	srv := exec.Command("ip", "netns", "exec", nsName, "python3", "-m", "http.server", "80", "--bind", in.addr, "--directory", dir)
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	cl := &http.Client{Timeout: 2 * time.Second}
	for i := 0; ; i++ {
		r, err := cl.Get("http://" + in.addr + "/")
		if err == nil {
			r.Body.Close()
			break
		}
		if i > 150 {
			t.Fatalf("the test internet's server did not start: %v\n%s", err, srvOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return in
}

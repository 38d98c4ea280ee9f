package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	resourcehelper "k8s.io/kubernetes/pkg/api/v1/resource"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"
	"k8s.io/utils/ptr"
)

// A podWorker runs one Pod: it owns the Pod's processes, its directory
// <state>/pods/<ns>_<name>_<uid8>, its loopback IP, probes and status. All its
// state is touched only by its run goroutine; the process goroutines and
// probes talk to it through events.

type evKind int

const (
	evExit evKind = iota
	evProbe
	evRestart
)

type event struct {
	kind     evKind
	c        *ctr
	gen      int
	exitCode int
	signal   string
	probe    string // readiness | liveness | startup
	ok       bool
}

type proc struct {
	pid  int
	done chan struct{}
}

type ctr struct {
	spec    corev1.Container
	init    bool
	sidecar bool
	bin     string
	gen     int

	proc      *proc
	startedAt time.Time
	restarts  int32
	lastTerm  *corev1.ContainerStateTerminated
	term      *corev1.ContainerStateTerminated
	waiting   *corev1.ContainerStateWaiting
	ready     bool
	started   bool // startup probe passed (or none)
	done      bool // init container completed, or a container that will not restart
	backoff   time.Duration
	failures  map[string]int
	successes map[string]int
	stopProbe context.CancelFunc
	killing   bool
}

type podWorker struct {
	k   *kubelet
	uid string
	ns  string
	nm  string
	dir string

	mu      sync.Mutex
	latest  *corev1.Pod
	signal  chan struct{}
	goneCh  chan struct{}
	gone1   sync.Once
	stopped chan struct{}

	events chan event
	status chan *corev1.PodStatus

	// run-goroutine state
	pod         *corev1.Pod
	ip          string
	ctrs        []*ctr
	startTime   *metav1.Time
	tokens      map[string]tokenCacheEntry
	terminating bool
	phase       corev1.PodPhase
	reason, msg string
	initialized bool

	procMu sync.Mutex
	procs  map[*proc]bool
}

func newPodWorker(k *kubelet, pod *corev1.Pod) *podWorker {
	uid := string(pod.UID)
	short := uid
	if len(short) > 8 {
		short = short[:8]
	}
	return &podWorker{
		k: k, uid: uid, ns: pod.Namespace, nm: pod.Name,
		dir:     filepath.Join(k.cfg.stateDir, "pods", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, short)),
		signal:  make(chan struct{}, 1),
		goneCh:  make(chan struct{}),
		stopped: make(chan struct{}),
		events:  make(chan event, 64),
		status:  make(chan *corev1.PodStatus, 1),
		tokens:  map[string]tokenCacheEntry{},
		procs:   map[*proc]bool{},
		phase:   corev1.PodPending,
		// Set before run starts: podChanged starts run and only then calls update, so run's
		// first current() could otherwise read nil (a nil-pointer crash of the whole cluster).
		latest: pod,
	}
}

func (w *podWorker) update(pod *corev1.Pod) {
	w.mu.Lock()
	w.latest = pod
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *podWorker) current() *corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest
}

// refreshPod takes the latest Pod from the informer, keeping the IP this
// worker assigned (the API may not have it yet).
func (w *podWorker) refreshPod() {
	p := w.current().DeepCopy()
	if w.ip != "" {
		p.Status.PodIP = w.ip
		p.Status.PodIPs = []corev1.PodIP{{IP: w.ip}}
	}
	w.pod = p
}

func (w *podWorker) gone() { w.gone1.Do(func() { close(w.goneCh) }) }

func (w *podWorker) key() string { return w.ns + "/" + w.nm }

// --- main loop --------------------------------------------------------------------

func (w *podWorker) run(ctx context.Context) {
	defer w.k.forget(types.UID(w.uid))
	defer close(w.stopped)
	go w.statusWriter(ctx)
	w.pod = w.current()

	// 1. images → binaries, volumes, IP
	for {
		if done := w.checkGoneOrDeleted(ctx); done {
			return
		}
		err := w.prepare(ctx)
		if err == nil {
			break
		}
		var ie *imageError
		if errors.As(err, &ie) {
			w.setPending(ie.reason, ie.msg)
		} else {
			w.setPending("ContainerCreating", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-w.goneCh:
			w.cleanup()
			return
		case <-w.signal:
			w.refreshPod()
		case <-time.After(2 * time.Second):
		}
	}
	w.reason, w.msg = "", ""
	w.pushStatus()

	// 2. run
	refresh := time.NewTicker(5 * time.Second)
	defer refresh.Stop()
	w.advance(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.goneCh:
			w.terminate(ctx, 1*time.Second, false)
			return
		case <-w.signal:
			w.refreshPod()
			if w.pod.DeletionTimestamp != nil {
				grace := int64(30)
				if w.pod.DeletionGracePeriodSeconds != nil {
					grace = *w.pod.DeletionGracePeriodSeconds
				} else if w.pod.Spec.TerminationGracePeriodSeconds != nil {
					grace = *w.pod.Spec.TerminationGracePeriodSeconds
				}
				w.terminate(ctx, time.Duration(grace)*time.Second, true)
				return
			}
		case ev := <-w.events:
			w.handle(ctx, ev)
			w.advance(ctx)
		case <-refresh.C:
			if err := w.materializeVolumes(ctx, w.pod); err != nil {
				klog.V(2).InfoS("refreshing volumes", "pod", w.key(), "err", err)
			}
		}
	}
}

// checkGoneOrDeleted handles a pod that went away before anything ran.
func (w *podWorker) checkGoneOrDeleted(ctx context.Context) bool {
	select {
	case <-w.goneCh:
		w.cleanup()
		return true
	default:
	}
	if w.pod.DeletionTimestamp != nil {
		w.k.finalDelete(ctx, w.pod)
		w.cleanup()
		return true
	}
	return false
}

func (w *podWorker) setPending(reason, msg string) {
	if w.reason != reason || w.msg != msg {
		klog.InfoS("pod pending", "pod", w.key(), "reason", reason, "message", msg)
	}
	w.reason, w.msg = reason, msg
	w.pushStatus()
}

// prepare resolves all images, allocates the IP, writes volumes and the
// kubeconfig. Retried until it succeeds.
func (w *podWorker) prepare(ctx context.Context) error {
	pod := w.pod
	if w.ctrs == nil {
		var ctrs []*ctr
		for _, c := range pod.Spec.InitContainers {
			ctrs = append(ctrs, &ctr{spec: c, init: true, sidecar: c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways})
		}
		for _, c := range pod.Spec.Containers {
			ctrs = append(ctrs, &ctr{spec: c})
		}
		for _, c := range ctrs {
			c.failures, c.successes = map[string]int{}, map[string]int{}
			c.waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		w.ctrs = ctrs
	}
	for _, c := range w.ctrs {
		bin, err := w.k.cfg.images.resolve(c.spec.Image)
		if err != nil {
			c.waiting = &corev1.ContainerStateWaiting{Reason: err.(*imageError).reason, Message: err.Error()}
			return err
		}
		c.bin = bin
		c.waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	}
	if w.ip == "" {
		ip, err := w.k.ips.allocate()
		if err != nil {
			return err
		}
		w.ip = ip
		now := metav1.Now()
		w.startTime = &now
	}
	// the pod as the processes see it: with its IP
	pod = pod.DeepCopy()
	pod.Status.PodIP = w.ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: w.ip}}
	w.pod = pod
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return err
	}
	if err := w.materializeVolumes(ctx, pod); err != nil {
		return err
	}
	if err := w.writeKubeconfig(); err != nil {
		return err
	}
	for _, c := range w.ctrs {
		// a new pod starts a new log file
		os.Remove(w.logPath(c))
	}
	return nil
}

// logTail is what a kubelet reports as the termination message of a container with
// terminationMessagePolicy FallbackToLogsOnError that exited with an error: the end of its
// log, at most 80 lines and 2048 bytes.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const maxBytes, maxLines = 2048, 80
	info, err := f.Stat()
	if err != nil {
		return ""
	}
	off := info.Size() - maxBytes
	if off < 0 {
		off = 0
	}
	buf := make([]byte, info.Size()-off)
	n, _ := f.ReadAt(buf, off)
	lines := strings.Split(strings.TrimRight(string(buf[:n]), "\n"), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // the first line is cut
	}
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n")
}

func (w *podWorker) logPath(c *ctr) string {
	return filepath.Join(w.k.logsDir(), logFileName(w.ns, w.nm, c.spec.Name))
}

// advance starts whatever should run now: init containers in order, then
// all the others.
func (w *podWorker) advance(ctx context.Context) {
	if w.terminating {
		return
	}
	policy := w.pod.Spec.RestartPolicy
	allInitDone := true
	for _, c := range w.ctrs {
		if !c.init {
			continue
		}
		if c.sidecar {
			if c.proc == nil && !c.done && !c.backingOff() {
				w.start(ctx, c)
			}
			if !c.started {
				allInitDone = false
				break
			}
			continue
		}
		if c.done {
			continue
		}
		allInitDone = false
		if c.proc == nil && c.term == nil && !c.backingOff() {
			w.start(ctx, c)
		}
		if c.term != nil && policy == corev1.RestartPolicyNever {
			w.phase = corev1.PodFailed
		}
		break
	}
	w.initialized = allInitDone
	if allInitDone {
		for _, c := range w.ctrs {
			if c.init || c.done || c.proc != nil {
				continue
			}
			if c.backingOff() {
				continue
			}
			if c.term != nil {
				continue
			}
			w.start(ctx, c)
		}
	}
	w.computePhase()
	w.pushStatus()
}

func (w *podWorker) computePhase() {
	if w.phase == corev1.PodFailed || w.phase == corev1.PodSucceeded {
		return
	}
	if !w.initialized {
		w.phase = corev1.PodPending
		return
	}
	running, succeeded, failed, total := 0, 0, 0, 0
	for _, c := range w.ctrs {
		if c.init {
			continue
		}
		total++
		switch {
		case c.proc != nil:
			running++
		case c.done && c.term != nil && c.term.ExitCode == 0:
			succeeded++
		case c.done && c.term != nil:
			failed++
		default:
			running++ // restarting
		}
	}
	switch {
	case running > 0:
		w.phase = corev1.PodRunning
	case failed > 0:
		w.phase = corev1.PodFailed
	case succeeded == total:
		w.phase = corev1.PodSucceeded
	}
}

// --- processes --------------------------------------------------------------------

func (w *podWorker) start(ctx context.Context, c *ctr) {
	root, err := w.setupRoot(&c.spec)
	if err != nil {
		c.waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerError", Message: err.Error()}
		return
	}
	env, err := w.containerEnv(ctx, c, root)
	if err != nil {
		c.waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}
		w.scheduleRetry(c, 2*time.Second)
		return
	}
	rw := newPathRewriter(root, &c.spec)
	mapping := expansion.MappingFuncFor(envMap(env))
	var argv []string
	if len(c.spec.Command) > 1 {
		argv = append(argv, c.spec.Command[1:]...)
	}
	argv = append(argv, c.spec.Args...)
	for i := range argv {
		argv[i] = rw.rewrite(expansion.Expand(argv[i], mapping))
	}
	wd := root
	if c.spec.WorkingDir != "" {
		wd = rw.rewrite(c.spec.WorkingDir)
		if !strings.HasPrefix(wd, root) {
			wd = filepath.Join(root, wd)
		}
		os.MkdirAll(wd, 0o755)
	}
	logf, err := os.OpenFile(w.logPath(c), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerError", Message: err.Error()}
		return
	}
	c.gen++
	gen := c.gen
	cmd := exec.Command(c.bin, argv...)
	cmd.Env = env
	cmd.Dir = wd
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Own process group (so a signal reaches the whole tree) and SIGKILL
	// when the testenv dies (the starting thread stays locked until the
	// process exits, see below).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	p := &proc{done: make(chan struct{})}
	go func() {
		runtime.LockOSThread() // Pdeathsig is tied to this thread: keep it until Wait returns
		defer logf.Close()
		if err := cmd.Start(); err != nil {
			started <- err
			close(p.done)
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		err := cmd.Wait()
		code, sig := 0, ""
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					code, sig = 128+int(ws.Signal()), ws.Signal().String()
				} else {
					code = ee.ExitCode()
				}
			} else {
				code = 1
			}
		}
		close(p.done)
		select {
		case w.events <- event{kind: evExit, c: c, gen: gen, exitCode: code, signal: sig}:
		case <-w.stopped:
		}
	}()
	if err := <-started; err != nil {
		c.waiting = &corev1.ContainerStateWaiting{Reason: "RunContainerError", Message: err.Error()}
		w.scheduleRetry(c, 2*time.Second)
		return
	}
	w.procMu.Lock()
	w.procs[p] = true
	w.procMu.Unlock()
	os.WriteFile(filepath.Join(w.dir, c.spec.Name+".pid"), []byte(strconv.Itoa(p.pid)), 0o644)
	klog.InfoS("started container", "pod", w.key(), "container", c.spec.Name, "pid", p.pid, "ip", w.ip, "binary", c.bin)
	c.proc = p
	c.startedAt = time.Now()
	c.waiting, c.term = nil, nil
	c.started = c.spec.StartupProbe == nil
	c.ready = c.started && c.spec.ReadinessProbe == nil
	c.failures, c.successes = map[string]int{}, map[string]int{}
	pctx, cancel := context.WithCancel(ctx)
	c.stopProbe = cancel
	w.startProbes(pctx, c, gen, env, rw, root)
}

func (w *podWorker) scheduleRetry(c *ctr, d time.Duration) {
	gen := c.gen
	time.AfterFunc(d, func() {
		select {
		case w.events <- event{kind: evRestart, c: c, gen: gen}:
		default:
		}
	})
}

func (w *podWorker) handle(ctx context.Context, ev event) {
	c := ev.c
	switch ev.kind {
	case evRestart:
		if ev.gen != c.gen || c.proc != nil || w.terminating {
			return
		}
		if c.backingOff() {
			c.waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
			c.term = nil
			w.start(ctx, c)
		}
	case evProbe:
		if ev.gen != c.gen || c.proc == nil {
			return
		}
		w.probeResult(c, ev.probe, ev.ok)
	case evExit:
		if ev.gen != c.gen {
			return
		}
		w.procMu.Lock()
		delete(w.procs, c.proc)
		w.procMu.Unlock()
		if c.stopProbe != nil {
			c.stopProbe()
		}
		os.Remove(filepath.Join(w.dir, c.spec.Name+".pid"))
		reason := "Completed"
		if ev.exitCode != 0 {
			reason = "Error"
		}
		if c.killing && ev.exitCode != 0 {
			reason = "Killed"
		}
		term := &corev1.ContainerStateTerminated{
			ExitCode: int32(ev.exitCode), Reason: reason, Signal: 0,
			StartedAt: metav1.NewTime(c.startedAt), FinishedAt: metav1.Now(),
			ContainerID: c.containerID(),
		}
		if ev.signal != "" {
			term.Message = "terminated by " + ev.signal
		} else if ev.exitCode != 0 && c.spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
			term.Message = logTail(w.logPath(c))
		}
		klog.InfoS("container exited", "pod", w.key(), "container", c.spec.Name, "code", ev.exitCode, "signal", ev.signal)
		c.proc = nil
		c.ready = false
		c.killing = false
		c.term = term
		if w.terminating {
			return
		}
		policy := w.pod.Spec.RestartPolicy
		restart := false
		switch {
		case c.sidecar:
			restart = true
		case c.init:
			if ev.exitCode == 0 {
				c.done = true
				return
			}
			if policy == corev1.RestartPolicyNever {
				return // the pod fails (see advance)
			}
			restart = true
		default:
			restart = policy == corev1.RestartPolicyAlways || (policy == corev1.RestartPolicyOnFailure && ev.exitCode != 0)
		}
		if c.spec.RestartPolicy != nil && !c.init {
			restart = *c.spec.RestartPolicy == corev1.ContainerRestartPolicyAlways ||
				(*c.spec.RestartPolicy == corev1.ContainerRestartPolicyOnFailure && ev.exitCode != 0)
		}
		if !restart {
			c.done = true
			return
		}
		// restart with backoff: 1s, 2s, 4s ... 20s; reset after 60s of running
		if time.Since(c.startedAt) > 60*time.Second {
			c.backoff = 0
		}
		if c.backoff == 0 {
			c.backoff = time.Second
		} else if c.backoff < 20*time.Second {
			c.backoff *= 2
		}
		c.restarts++
		c.lastTerm = term
		c.term = nil
		c.waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", c.backoff, c.spec.Name, w.key())}
		w.scheduleRetry(c, c.backoff)
	}
}

// backingOff: the container waits for a timer (crash loop back-off or a
// retry after a configuration error) before it is started again.
func (c *ctr) backingOff() bool {
	return c.waiting != nil && (c.waiting.Reason == "CrashLoopBackOff" || strings.HasSuffix(c.waiting.Reason, "Error"))
}

// probeResult applies a probe's thresholds.
func (w *podWorker) probeResult(c *ctr, kind string, ok bool) {
	var p *corev1.Probe
	switch kind {
	case "startup":
		p = c.spec.StartupProbe
	case "readiness":
		p = c.spec.ReadinessProbe
	case "liveness":
		p = c.spec.LivenessProbe
	}
	if p == nil {
		return
	}
	if ok {
		c.successes[kind]++
		c.failures[kind] = 0
	} else {
		c.failures[kind]++
		c.successes[kind] = 0
	}
	failThr := int(p.FailureThreshold)
	if failThr <= 0 {
		failThr = 3
	}
	okThr := int(p.SuccessThreshold)
	if okThr <= 0 {
		okThr = 1
	}
	kill := func() {
		if c.killing {
			return
		}
		grace := int64(30)
		if w.pod.Spec.TerminationGracePeriodSeconds != nil {
			grace = *w.pod.Spec.TerminationGracePeriodSeconds
		}
		if p.TerminationGracePeriodSeconds != nil {
			grace = *p.TerminationGracePeriodSeconds
		}
		klog.InfoS("probe failed, killing container", "pod", w.key(), "container", c.spec.Name, "probe", kind)
		c.killing = true
		c.ready = false
		stopProc(c.proc, time.Duration(grace)*time.Second)
	}
	switch kind {
	case "startup":
		if ok {
			c.started = true
			if c.spec.ReadinessProbe == nil {
				c.ready = true
			}
		} else if c.failures[kind] >= failThr {
			kill()
		}
	case "liveness":
		if c.started && !ok && c.failures[kind] >= failThr {
			kill()
		}
	case "readiness":
		if !c.started {
			return
		}
		if ok && c.successes[kind] >= okThr {
			c.ready = true
		}
		if !ok && c.failures[kind] >= failThr {
			c.ready = false
		}
	}
}

func (c *ctr) containerID() string {
	if c.proc == nil {
		return ""
	}
	return fmt.Sprintf("testenv://%d", c.proc.pid)
}

// stop signals a container's process group with SIGTERM and SIGKILLs it
// after grace. It does not wait.
func stopProc(p *proc, grace time.Duration) {
	if p == nil || p.pid <= 0 {
		return
	}
	syscall.Kill(-p.pid, syscall.SIGTERM)
	go func() {
		select {
		case <-p.done:
		case <-time.After(grace):
			syscall.Kill(-p.pid, syscall.SIGKILL)
		}
		// whatever the main process left behind in its group
		time.Sleep(100 * time.Millisecond)
		syscall.Kill(-p.pid, syscall.SIGKILL)
	}()
}

// terminate stops every container (SIGTERM, SIGKILL after grace), and when
// the pod still exists in the API, deletes it for good.
func (w *podWorker) terminate(ctx context.Context, grace time.Duration, deleteFromAPI bool) {
	w.terminating = true
	for _, c := range w.ctrs {
		c.ready = false
		if c.stopProbe != nil {
			c.stopProbe()
		}
	}
	w.pushStatus()
	klog.InfoS("terminating pod", "pod", w.key(), "grace", grace)
	var waits []chan struct{}
	for _, c := range w.ctrs {
		if c.proc != nil {
			c.killing = true
			stopProc(c.proc, grace)
			waits = append(waits, c.proc.done)
		}
	}
	deadline := time.After(grace + 5*time.Second)
	for _, d := range waits {
		select {
		case <-d:
		case <-deadline:
		}
	}
	// drain exit events to record final states
	for {
		select {
		case ev := <-w.events:
			w.handle(ctx, ev)
			continue
		default:
		}
		break
	}
	if deleteFromAPI {
		w.k.finalDelete(ctx, w.pod)
	}
	w.cleanup()
}

// killAll is the shutdown path (called from another goroutine).
func (w *podWorker) killAll(grace time.Duration) {
	w.procMu.Lock()
	ps := make([]*proc, 0, len(w.procs))
	for p := range w.procs {
		ps = append(ps, p)
	}
	w.procMu.Unlock()
	for _, p := range ps {
		stopProc(p, grace)
	}
	for _, p := range ps {
		select {
		case <-p.done:
		case <-time.After(grace + 2*time.Second):
		}
	}
}

func (w *podWorker) cleanup() {
	if w.ip != "" {
		w.k.ips.release(w.ip)
		w.ip = ""
	}
	os.RemoveAll(w.dir)
}

// --- environment ------------------------------------------------------------------

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

var passThroughEnv = []string{"PATH", "LANG", "LC_ALL", "TMPDIR", "RUST_BACKTRACE", "RUST_LOG", "SSL_CERT_FILE", "SSL_CERT_DIR"}

// containerEnv builds the process environment: testenv variables first
// (so the Pod's own env can override them), then envFrom, then env with
// $(VAR) expansion; mountPath prefixes in values are rewritten.
func (w *podWorker) containerEnv(ctx context.Context, c *ctr, root string) ([]string, error) {
	pod := w.pod
	order := []string{}
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, k := range passThroughEnv {
		if v, ok := os.LookupEnv(k); ok {
			set(k, v)
		}
	}
	if _, ok := vals["PATH"]; !ok {
		set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	port := strconv.Itoa(w.k.cfg.apiPort)
	set("HOME", filepath.Join(root, "home"))
	set("HOSTNAME", pod.Name)
	set("KUBERNETES_SERVICE_HOST", "127.0.0.1")
	set("KUBERNETES_SERVICE_PORT", port)
	set("KUBERNETES_SERVICE_PORT_HTTPS", port)
	set("KUBERNETES_PORT", "tcp://127.0.0.1:"+port)
	set("KUBERNETES_PORT_443_TCP", "tcp://127.0.0.1:"+port)
	set("KUBERNETES_PORT_443_TCP_PROTO", "tcp")
	set("KUBERNETES_PORT_443_TCP_ADDR", "127.0.0.1")
	set("KUBERNETES_PORT_443_TCP_PORT", port)
	set("KUBECONFIG", filepath.Join(w.dir, "kubeconfig"))
	set("DCO_TESTENV", "1")
	set("DCO_TESTENV_ROOT", root)
	set("DCO_TESTENV_POD_DIR", w.dir)
	set("DCO_TESTENV_POD_IP", w.ip)
	set("DCO_TESTENV_POD_NAME", pod.Name)
	set("DCO_TESTENV_POD_NAMESPACE", pod.Namespace)
	set("DCO_TESTENV_CA_FILE", filepath.Join(w.dir, "ca.crt"))
	set("DCO_TESTENV_APISERVER", w.k.cfg.apiHost)

	rw := newPathRewriter(root, &c.spec)
	for _, ef := range c.spec.EnvFrom {
		var data map[string][]byte
		var err error
		switch {
		case ef.ConfigMapRef != nil:
			data, err = w.configMapData(ctx, pod.Namespace, ef.ConfigMapRef.Name, ptrBool(ef.ConfigMapRef.Optional))
		case ef.SecretRef != nil:
			data, err = w.secretData(ctx, pod.Namespace, ef.SecretRef.Name, ptrBool(ef.SecretRef.Optional))
		}
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set(ef.Prefix+k, rw.rewrite(string(data[k])))
		}
	}
	for _, e := range c.spec.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			v = expansion.Expand(e.Value, expansion.MappingFuncFor(vals))
		case e.ValueFrom.FieldRef != nil:
			fv, err := podFieldValue(pod, e.ValueFrom.FieldRef.FieldPath)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			v = fv
		case e.ValueFrom.ResourceFieldRef != nil:
			rv, err := resourcehelper.ExtractResourceValueByContainerNameAndNodeAllocatable(e.ValueFrom.ResourceFieldRef, pod, c.spec.Name, w.k.nodeObject().Status.Allocatable)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			v = rv
		case e.ValueFrom.SecretKeyRef != nil:
			r := e.ValueFrom.SecretKeyRef
			data, err := w.secretData(ctx, pod.Namespace, r.Name, ptrBool(r.Optional))
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			b, ok := data[r.Key]
			if !ok {
				if ptrBool(r.Optional) {
					continue
				}
				return nil, fmt.Errorf("env %s: secret %q has no key %q", e.Name, r.Name, r.Key)
			}
			v = string(b)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			r := e.ValueFrom.ConfigMapKeyRef
			data, err := w.configMapData(ctx, pod.Namespace, r.Name, ptrBool(r.Optional))
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			b, ok := data[r.Key]
			if !ok {
				if ptrBool(r.Optional) {
					continue
				}
				return nil, fmt.Errorf("env %s: configmap %q has no key %q", e.Name, r.Name, r.Key)
			}
			v = string(b)
		default:
			continue
		}
		set(e.Name, rw.rewrite(v))
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, nil
}

// writeKubeconfig writes <poddir>/kubeconfig (KUBECONFIG of every process):
// the apiserver on loopback, the cluster CA, and the Pod's projected
// service-account token file when it has one (refreshed in place).
func (w *podWorker) writeKubeconfig() error {
	ca, err := os.ReadFile(w.k.cfg.caFile)
	if err != nil {
		return err
	}
	caPath := filepath.Join(w.dir, "ca.crt")
	if err := os.WriteFile(caPath, ca, 0o644); err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: w.k.cfg.apiHost, CertificateAuthority: caPath}
	user := &clientcmdapi.AuthInfo{}
	if tok := w.tokenFile(); tok != "" {
		user.TokenFile = tok
	}
	kc.AuthInfos["pod"] = user
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "pod", Namespace: w.ns}
	kc.CurrentContext = "testenv"
	return clientcmd.WriteToFile(*kc, filepath.Join(w.dir, "kubeconfig"))
}

// tokenFile is the path of the service-account token of the volume mounted
// at the standard path (or of any projected token volume).
func (w *podWorker) tokenFile() string {
	const std = "/var/run/secrets/kubernetes.io/serviceaccount"
	var fallback string
	mounted := map[string]bool{}
	for _, c := range w.pod.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if filepath.Clean(m.MountPath) == std {
				mounted[m.Name] = true
			}
		}
	}
	for _, v := range w.pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil {
				p := filepath.Join(w.volumeDir(v.Name), s.ServiceAccountToken.Path)
				if mounted[v.Name] {
					return p
				}
				if fallback == "" && s.ServiceAccountToken.Audience == "" {
					fallback = p
				}
			}
		}
	}
	return fallback
}

// --- status -----------------------------------------------------------------------

func (w *podWorker) buildStatus() *corev1.PodStatus {
	st := &corev1.PodStatus{Phase: w.phase, Reason: w.reason, Message: w.msg, QOSClass: corev1.PodQOSBestEffort}
	if w.pod.Status.QOSClass != "" {
		st.QOSClass = w.pod.Status.QOSClass
	}
	st.HostIP = "127.0.0.1"
	st.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
	if w.ip != "" && !(w.terminating && w.phase != corev1.PodRunning) {
		st.PodIP = w.ip
		st.PodIPs = []corev1.PodIP{{IP: w.ip}}
	}
	st.StartTime = w.startTime
	allReady, anyCtr := true, false
	for _, c := range w.ctrs {
		cs := corev1.ContainerStatus{
			Name:         c.spec.Name,
			Image:        c.spec.Image,
			ImageID:      "testenv://" + c.bin,
			RestartCount: c.restarts,
			Ready:        c.ready,
			Started:      ptr.To(c.proc != nil && c.started),
			LastTerminationState: corev1.ContainerState{
				Terminated: c.lastTerm,
			},
		}
		switch {
		case c.proc != nil:
			cs.ContainerID = c.containerID()
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
		case c.term != nil:
			cs.State.Terminated = c.term
			cs.ContainerID = c.term.ContainerID
		case c.waiting != nil:
			cs.State.Waiting = c.waiting
		default:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		if c.init {
			if c.sidecar {
				cs.Ready = c.ready
			} else {
				cs.Ready = c.done
			}
			st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
			continue
		}
		anyCtr = true
		if !c.ready {
			allReady = false
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	if w.terminating {
		allReady = false
	}
	cond := func(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
			reason = ""
		}
		return corev1.PodCondition{Type: t, Status: s, Reason: reason}
	}
	ready := allReady && anyCtr && w.phase == corev1.PodRunning
	notReadyReason := "ContainersNotReady"
	if w.phase == corev1.PodSucceeded || w.phase == corev1.PodFailed {
		notReadyReason = "PodCompleted"
	}
	st.Conditions = []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, w.ip != "" && w.reason == "", ""),
		cond(corev1.PodInitialized, w.initialized, "ContainersNotInitialized"),
		cond(corev1.ContainersReady, ready, notReadyReason),
		cond(corev1.PodReady, ready, notReadyReason),
	}
	return st
}

func (w *podWorker) pushStatus() {
	st := w.buildStatus()
	select {
	case <-w.status:
	default:
	}
	w.status <- st
}

// statusWriter writes the latest status, merging in the conditions the
// kubelet does not own (PodScheduled, DisruptionTarget, readiness gates...).
func (w *podWorker) statusWriter(ctx context.Context) {
	pods := w.k.client.CoreV1().Pods(w.ns)
	var last *corev1.PodStatus
	for {
		var st *corev1.PodStatus
		select {
		case <-ctx.Done():
			return
		case <-w.stopped:
			return
		case st = <-w.status:
		}
		if last != nil && apiequality.Semantic.DeepEqual(last, st) {
			continue
		}
		for attempt := 0; attempt < 10; attempt++ {
			cur, err := pods.Get(ctx, w.nm, metav1.GetOptions{})
			if err != nil || string(cur.UID) != w.uid {
				break
			}
			now := metav1.Now()
			next := st.DeepCopy()
			owned := map[corev1.PodConditionType]bool{}
			for i := range next.Conditions {
				c := &next.Conditions[i]
				owned[c.Type] = true
				c.LastTransitionTime = now
				for _, old := range cur.Status.Conditions {
					if old.Type == c.Type && old.Status == c.Status {
						c.LastTransitionTime = old.LastTransitionTime
					}
				}
			}
			for _, old := range cur.Status.Conditions {
				if !owned[old.Type] {
					next.Conditions = append(next.Conditions, old)
				}
			}
			if next.QOSClass == "" {
				next.QOSClass = cur.Status.QOSClass
			}
			if apiequality.Semantic.DeepEqual(cur.Status, *next) {
				break
			}
			cur.Status = *next
			_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			if err == nil || apierrors.IsNotFound(err) {
				break
			}
			if !apierrors.IsConflict(err) {
				klog.V(2).InfoS("pod status update failed", "pod", w.key(), "err", err)
				time.Sleep(200 * time.Millisecond)
			}
		}
		last = st
	}
}

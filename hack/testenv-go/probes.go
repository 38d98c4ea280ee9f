package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"
)

// Probes: httpGet (http and https, certificate not verified, as the kubelet
// does), tcpSocket and exec run against the Pod's loopback IP; grpc probes
// are treated as a TCP connect. Results go to the pod worker, which applies
// the thresholds and turns readiness into the Ready condition.

var probeHTTP = &http.Client{
	Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // the kubelet does not verify probe targets either
		DisableKeepAlives: true,
		Proxy:             nil,
	},
	CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return http.ErrUseLastResponse
		}
		return nil
	},
}

func probeSeconds(v int32, def int32) time.Duration {
	if v <= 0 {
		v = def
	}
	return time.Duration(v) * time.Second
}

func (w *podWorker) startProbes(ctx context.Context, c *ctr, gen int, env []string, rw *pathRewriter, root string) {
	spec := c.spec
	ip := w.ip
	launch := func(kind string, p *corev1.Probe) {
		if p == nil {
			return
		}
		go func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
			}
			period := probeSeconds(p.PeriodSeconds, 10)
			timeout := probeSeconds(p.TimeoutSeconds, 1)
			for {
				ok := runProbe(ctx, p, &spec, ip, timeout, env, rw, root)
				select {
				case w.events <- event{kind: evProbe, c: c, gen: gen, probe: kind, ok: ok}:
				case <-ctx.Done():
					return
				}
				if kind == "startup" && ok {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(period):
				}
			}
		}()
	}
	launch("startup", spec.StartupProbe)
	launch("readiness", spec.ReadinessProbe)
	launch("liveness", spec.LivenessProbe)
}

func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, bool) {
	if p.Type == intstr.Int {
		return int(p.IntVal), p.IntVal > 0
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, true
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), true
		}
	}
	return 0, false
}

func runProbe(ctx context.Context, p *corev1.Probe, c *corev1.Container, ip string, timeout time.Duration, env []string, rw *pathRewriter, root string) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.HTTPGet != nil:
		h := p.HTTPGet
		port, ok := resolvePort(h.Port, c)
		if !ok {
			return false
		}
		host := h.Host
		if host == "" {
			host = ip
		}
		scheme := strings.ToLower(string(h.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		path := h.Path
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}
		full := u.String() + path
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, full, nil)
		if err != nil {
			return false
		}
		req.Header.Set("User-Agent", "kube-probe/testenv")
		for _, hd := range h.HTTPHeaders {
			if strings.EqualFold(hd.Name, "host") {
				req.Host = hd.Value
			} else {
				req.Header.Add(hd.Name, hd.Value)
			}
		}
		resp, err := probeHTTP.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	case p.TCPSocket != nil, p.GRPC != nil:
		var port int
		var host string
		if p.TCPSocket != nil {
			var ok bool
			if port, ok = resolvePort(p.TCPSocket.Port, c); !ok {
				return false
			}
			host = p.TCPSocket.Host
		} else {
			port = int(p.GRPC.Port)
		}
		if host == "" {
			host = ip
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		conn.Close()
		return true
	case p.Exec != nil:
		if len(p.Exec.Command) == 0 {
			return false
		}
		mapping := expansion.MappingFuncFor(envMap(env))
		argv := make([]string, len(p.Exec.Command))
		for i, a := range p.Exec.Command {
			argv[i] = rw.rewrite(expansion.Expand(a, mapping))
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = env
		cmd.Dir = root
		return cmd.Run() == nil
	}
	return false
}

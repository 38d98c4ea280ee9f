package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPathRewriter(t *testing.T) {
	c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "tls", MountPath: "/etc/tls"},
		{Name: "tls2", MountPath: "/etc/tls-extra/"},
		{Name: "sa", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"},
	}}
	r := newPathRewriter("/R", c)
	for in, want := range map[string]string{
		"/etc/tls/tls.crt":              "/R/etc/tls/tls.crt",
		"--cert=/etc/tls/tls.crt":       "--cert=/R/etc/tls/tls.crt",
		"--certs=/etc/tls/a,/etc/tls/b": "--certs=/R/etc/tls/a,/R/etc/tls/b",
		"/etc/tls-extra/x":              "/R/etc/tls-extra/x",
		"/etc/tlsfoo":                   "/etc/tlsfoo",
		"/etc/tls":                      "/R/etc/tls",
		"x/etc/tls/a":                   "x/etc/tls/a",
		"/var/run/secrets/kubernetes.io/serviceaccount/token": "/R/var/run/secrets/kubernetes.io/serviceaccount/token",
		"no paths here": "no paths here",
	} {
		if got := r.rewrite(in); got != want {
			t.Errorf("rewrite(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestImageRepository(t *testing.T) {
	for in, want := range map[string]string{
		"dco-webhook":                          "dco-webhook",
		"dco-webhook:v1":                       "dco-webhook",
		"ghcr.io/acme/dco-webhook:v1":          "ghcr.io/acme/dco-webhook",
		"reg:5000/a/b:v1@sha256:abc":           "reg:5000/a/b",
		"reg:5000/a/b":                         "reg:5000/a/b",
		"reg:5000/a/b@sha256:0123456789abcdef": "reg:5000/a/b",
	} {
		if got := imageRepository(in); got != want {
			t.Errorf("imageRepository(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIPAllocator(t *testing.T) {
	a, err := newIPAllocator("127.0.0.254-127.0.1.2")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := 0; i < 3; i++ {
		ip, err := a.allocate()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ip)
	}
	// .255 and .0 are skipped
	if want := []string{"127.0.0.254", "127.0.1.1", "127.0.1.2"}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := a.allocate(); err == nil {
		t.Fatal("range exhausted: want an error")
	}
	a.release("127.0.1.1")
	if ip, _ := a.allocate(); ip != "127.0.1.1" {
		t.Fatalf("after release got %s", ip)
	}
	if _, err := newIPAllocator("10.0.0.1-10.0.0.9"); err == nil {
		t.Fatal("non-loopback range accepted")
	}
}

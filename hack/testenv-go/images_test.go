package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSplitImage(t *testing.T) {
	for in, want := range map[string][2]string{
		"dco-webhook":                       {"dco-webhook", "latest"},
		"dco-webhook:v0.2.0":                {"dco-webhook", "v0.2.0"},
		"ghcr.io/acme/dco-webhook:v1":       {"ghcr.io/acme/dco-webhook", "v1"},
		"reg:5000/a/b":                      {"reg:5000/a/b", "latest"},
		"reg:5000/a/b:v1@sha256:abc":        {"reg:5000/a/b", "v1"},
		"reg:5000/a/b@sha256:0123456789abc": {"reg:5000/a/b", "latest"},
	} {
		if repo, tag := splitImage(in); repo != want[0] || tag != want[1] {
			t.Errorf("splitImage(%q) = %q, %q, want %q, %q", in, repo, tag, want[0], want[1])
		}
	}
}

// TestImageMapTags: a NAME:TAG entry wins over NAME for that tag only, from
// every source (defaults, flags, the map file), by full repository or by its
// last path element; a later line of the map file replaces an earlier one.
func TestImageMapTags(t *testing.T) {
	dir := t.TempDir()
	bin := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old, rebuilt, mirror, flagged, later := bin("old"), bin("rebuilt"), bin("mirror"), bin("flagged"), bin("later")
	file := filepath.Join(dir, "images")
	m := newImageMap(dir, file, []string{"dco-operator=" + old, "dco-operator:v3=" + flagged})
	write := func(lines ...string) {
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(
		"# a helm upgrade to v0.2.0 runs the rebuilt binary",
		"dco-webhook="+old,
		"dco-webhook:v0.2.0="+rebuilt,
		"ghcr.io/acme/dco-webhook="+mirror,
		"dco-operator:v4="+rebuilt,
		"dco-operator:v4="+later,
	)
	for image, want := range map[string]string{
		"dco-webhook":                       old,
		"dco-webhook:v0.1.0":                old,
		"dco-webhook:v0.2.0":                rebuilt,
		"dco-webhook:v0.2.0@sha256:abc":     rebuilt,
		"registry.local/dco-webhook:v0.2.0": rebuilt,
		"ghcr.io/acme/dco-webhook:v0.1.0":   mirror,
		// the tag entry is more specific than the full repository's tag-less one
		"ghcr.io/acme/dco-webhook:v0.2.0": rebuilt,
		"dco-operator:v2":                 old,
		"dco-operator:v3":                 flagged,
		"dco-operator:v4":                 later,
	} {
		if got, err := m.resolve(image); err != nil || got != want {
			t.Errorf("resolve(%q) = %q, %v; want %q", image, got, err, want)
		}
	}
	// the built-in default still applies; its binary does not exist under this test's root
	if _, err := m.resolve("convctl:v9"); err == nil || err.(*imageError).reason != "BinaryNotFound" ||
		!strings.Contains(err.Error(), filepath.Join(dir, defaultImages["convctl"])) {
		t.Errorf("convctl:v9: got %v, want BinaryNotFound for the default entry", err)
	}

	// a full-repository tag entry wins over the last element's tag entry
	write("dco-webhook:v0.2.0="+rebuilt, "ghcr.io/acme/dco-webhook:v0.2.0="+mirror)
	if got, err := m.resolve("ghcr.io/acme/dco-webhook:v0.2.0"); err != nil || got != mirror {
		t.Errorf("full repository with tag: got %q, %v; want %q", got, err, mirror)
	}
	// an image without a tag is :latest
	write("dco-webhook:latest=" + rebuilt)
	if got, err := m.resolve("dco-webhook"); err != nil || got != rebuilt {
		t.Errorf("untagged image: got %q, %v; want the :latest entry %q", got, err, rebuilt)
	}

	_, err := m.resolve("unknown:v1")
	ie, ok := err.(*imageError)
	if !ok || ie.reason != "ImageNotMapped" || !strings.Contains(ie.msg, `"unknown:v1"`) || !strings.Contains(ie.msg, "NAME:TAG=PATH") {
		t.Errorf("unmapped image: got %v", err)
	}
}

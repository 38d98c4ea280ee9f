package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// defaultImages are the project's own images, mapped to the binaries cargo
// builds (paths relative to the repository root).
var defaultImages = map[string]string{
	"dco-webhook":  "target/debug/dco-webhook",
	"dco-operator": "target/debug/dco-operator",
	"convctl":      "target/debug/convctl",
}

// imageMap maps image repositories, or repositories at one tag, to local
// binaries. Sources, later ones win for the same key: the built-in defaults,
// DCO_TESTENV_IMAGES (NAME=PATH,NAME=PATH), the --image flags, and the image
// map file (NAME=PATH lines, '#' comments), which is re-read on every lookup
// so tests can add entries at run time. NAME is a repository or a repository
// with a tag (NAME:TAG); see resolve for which entry an image takes.
type imageMap struct {
	repoRoot string
	file     string
	static   map[string]string
	mu       sync.Mutex
}

func newImageMap(repoRoot, file string, flags []string) *imageMap {
	m := &imageMap{repoRoot: repoRoot, file: file, static: map[string]string{}}
	for k, v := range defaultImages {
		m.static[k] = v
	}
	for _, kv := range strings.Split(os.Getenv("DCO_TESTENV_IMAGES"), ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok {
			m.static[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	for _, kv := range flags {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m.static[k] = v
		}
	}
	return m
}

func (m *imageMap) entries() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for k, v := range m.static {
		out[k] = v
	}
	f, err := os.Open(m.file)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// imageRepository strips the tag and digest: "reg:5000/a/b:v1@sha256:.." -> "reg:5000/a/b".
func imageRepository(image string) string {
	repo, _ := splitImage(image)
	return repo
}

// splitImage splits an image into its repository and tag, dropping a digest:
// "reg:5000/a/b:v1@sha256:.." -> ("reg:5000/a/b", "v1"). An image without a
// tag has the tag "latest", as for the kubelet's runtime.
func splitImage(image string) (repo, tag string) {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	slash := strings.LastIndex(image, "/")
	if i := strings.LastIndex(image, ":"); i > slash {
		return image[:i], image[i+1:]
	}
	return image, "latest"
}

// resolve finds the binary for an image. Entries with the image's tag
// ("NAME:TAG=PATH") win over entries without one ("NAME=PATH"), so a test
// can map a new tag to a rebuilt binary while the old tag keeps its own;
// within each, the full repository ("ghcr.io/org/dco-webhook") is tried
// before its last path element ("dco-webhook"). The error says why the
// image cannot run.
func (m *imageMap) resolve(image string) (string, error) {
	repo, tag := splitImage(image)
	name := repo[strings.LastIndex(repo, "/")+1:]
	entries := m.entries()
	var path string
	ok := false
	for _, key := range []string{repo + ":" + tag, name + ":" + tag, repo, name} {
		if path, ok = entries[key]; ok {
			break
		}
	}
	if !ok {
		return "", &imageError{reason: "ImageNotMapped", msg: fmt.Sprintf(
			"image %q: neither %q nor repository %q is in the testenv image map (add NAME=PATH or NAME:TAG=PATH to %s or use --image)",
			image, name+":"+tag, repo, m.file)}
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(m.repoRoot, path)
	}
	st, err := os.Stat(path)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", &imageError{reason: "BinaryNotFound", msg: fmt.Sprintf(
			"image %q is mapped to %s, which is not an executable file (build it first)", image, path)}
	}
	return path, nil
}

type imageError struct{ reason, msg string }

func (e *imageError) Error() string { return e.msg }

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/kubernetes/pkg/api/v1/resource"
	"k8s.io/kubernetes/pkg/fieldpath"
)

// Volumes are materialised as plain directories under <poddir>/volumes/<name>.
// Each container gets its own root <poddir>/root/<container>, in which every
// volumeMount's mountPath is a symlink to the volume directory (or its
// subPath). The process gets DCO_TESTENV_ROOT=<that root>, and mountPath
// prefixes in its command, args and env values are rewritten to
// <root><mountPath>. Secret, ConfigMap, downwardAPI, projected (including
// serviceAccountToken) volumes are refreshed every few seconds; emptyDir is a
// directory; hostPath is a symlink to the host path.

type fileSet map[string]fileContent

type fileContent struct {
	data []byte
	mode os.FileMode
}

type tokenCacheEntry struct {
	token   []byte
	refresh time.Time
}

func (w *podWorker) volumeDir(name string) string {
	return filepath.Join(w.dir, "volumes", name)
}

// materializeVolumes writes every volume of the pod. It fails (and the pod
// waits in ContainerCreating) if a non-optional Secret/ConfigMap is missing.
func (w *podWorker) materializeVolumes(ctx context.Context, pod *corev1.Pod) error {
	for _, v := range pod.Spec.Volumes {
		dir := w.volumeDir(v.Name)
		switch {
		case v.EmptyDir != nil:
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return err
			}
		case v.HostPath != nil:
			if _, err := os.Lstat(dir); err != nil {
				os.MkdirAll(filepath.Dir(dir), 0o755)
				if v.HostPath.Type != nil && (*v.HostPath.Type == corev1.HostPathDirectoryOrCreate) {
					os.MkdirAll(v.HostPath.Path, 0o755)
				}
				if err := os.Symlink(v.HostPath.Path, dir); err != nil {
					return err
				}
			}
		case v.Secret != nil, v.ConfigMap != nil, v.Projected != nil, v.DownwardAPI != nil:
			files, err := w.volumeFiles(ctx, pod, v)
			if err != nil {
				return fmt.Errorf("volume %q: %w", v.Name, err)
			}
			if err := syncDir(dir, files); err != nil {
				return fmt.Errorf("volume %q: %w", v.Name, err)
			}
		default:
			// unsupported volume types get an empty directory
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *podWorker) volumeFiles(ctx context.Context, pod *corev1.Pod, v corev1.Volume) (fileSet, error) {
	files := fileSet{}
	ns := pod.Namespace
	switch {
	case v.Secret != nil:
		mode := modeOr(v.Secret.DefaultMode, 0o644)
		data, err := w.secretData(ctx, ns, v.Secret.SecretName, ptrBool(v.Secret.Optional))
		if err != nil {
			return nil, err
		}
		if err := addItems(files, data, v.Secret.Items, mode, "secret "+v.Secret.SecretName); err != nil {
			return nil, err
		}
	case v.ConfigMap != nil:
		mode := modeOr(v.ConfigMap.DefaultMode, 0o644)
		data, err := w.configMapData(ctx, ns, v.ConfigMap.Name, ptrBool(v.ConfigMap.Optional))
		if err != nil {
			return nil, err
		}
		if err := addItems(files, data, v.ConfigMap.Items, mode, "configmap "+v.ConfigMap.Name); err != nil {
			return nil, err
		}
	case v.DownwardAPI != nil:
		mode := modeOr(v.DownwardAPI.DefaultMode, 0o644)
		if err := w.downwardFiles(files, pod, v.DownwardAPI.Items, mode); err != nil {
			return nil, err
		}
	case v.Projected != nil:
		mode := modeOr(v.Projected.DefaultMode, 0o644)
		for i, src := range v.Projected.Sources {
			switch {
			case src.Secret != nil:
				data, err := w.secretData(ctx, ns, src.Secret.Name, ptrBool(src.Secret.Optional))
				if err != nil {
					return nil, err
				}
				if err := addItems(files, data, src.Secret.Items, mode, "secret "+src.Secret.Name); err != nil {
					return nil, err
				}
			case src.ConfigMap != nil:
				data, err := w.configMapData(ctx, ns, src.ConfigMap.Name, ptrBool(src.ConfigMap.Optional))
				if err != nil {
					return nil, err
				}
				if err := addItems(files, data, src.ConfigMap.Items, mode, "configmap "+src.ConfigMap.Name); err != nil {
					return nil, err
				}
			case src.DownwardAPI != nil:
				if err := w.downwardFiles(files, pod, src.DownwardAPI.Items, mode); err != nil {
					return nil, err
				}
			case src.ServiceAccountToken != nil:
				tok, err := w.saToken(ctx, pod, fmt.Sprintf("%s/%d", v.Name, i), src.ServiceAccountToken)
				if err != nil {
					return nil, err
				}
				files[src.ServiceAccountToken.Path] = fileContent{tok, mode}
			case src.ClusterTrustBundle != nil, src.PodCertificate != nil:
				// not supported by the testenv
			}
		}
	}
	return files, nil
}

func ptrBool(b *bool) bool { return b != nil && *b }

func modeOr(m *int32, def os.FileMode) os.FileMode {
	if m == nil {
		return def
	}
	return os.FileMode(*m) & 0o777
}

func addItems(files fileSet, data map[string][]byte, items []corev1.KeyToPath, mode os.FileMode, what string) error {
	if data == nil {
		return nil
	}
	if len(items) == 0 {
		for k, v := range data {
			files[k] = fileContent{v, mode}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("%s has no key %q", what, it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode) & 0o777
		}
		files[it.Path] = fileContent{v, m}
	}
	return nil
}

func (w *podWorker) secretData(ctx context.Context, ns, name string, optional bool) (map[string][]byte, error) {
	s, err := w.k.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && optional {
			return nil, nil
		}
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	out := map[string][]byte{}
	for k, v := range s.Data {
		out[k] = v
	}
	for k, v := range s.StringData {
		out[k] = []byte(v)
	}
	return out, nil
}

func (w *podWorker) configMapData(ctx context.Context, ns, name string, optional bool) (map[string][]byte, error) {
	c, err := w.k.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && optional {
			return nil, nil
		}
		return nil, fmt.Errorf("configmap %q: %w", name, err)
	}
	out := map[string][]byte{}
	for k, v := range c.Data {
		out[k] = []byte(v)
	}
	for k, v := range c.BinaryData {
		out[k] = v
	}
	return out, nil
}

func (w *podWorker) downwardFiles(files fileSet, pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, mode os.FileMode) error {
	for _, it := range items {
		var val string
		var err error
		switch {
		case it.FieldRef != nil:
			val, err = podFieldValue(pod, it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			val, err = resourcehelper.ExtractResourceValueByContainerNameAndNodeAllocatable(it.ResourceFieldRef, pod, it.ResourceFieldRef.ContainerName, w.k.nodeObject().Status.Allocatable)
		}
		if err != nil {
			return err
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode) & 0o777
		}
		files[it.Path] = fileContent{[]byte(val), m}
	}
	return nil
}

// podFieldValue resolves a downward API fieldRef against the pod.
func podFieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return "127.0.0.1", nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.podIPs":
		ips := make([]string, 0, len(pod.Status.PodIPs))
		for _, ip := range pod.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		return strings.Join(ips, ","), nil
	}
	return fieldpath.ExtractFieldPathAsString(pod, path)
}

func (w *podWorker) saToken(ctx context.Context, pod *corev1.Pod, key string, src *corev1.ServiceAccountTokenProjection) ([]byte, error) {
	if e, ok := w.tokens[key]; ok && time.Now().Before(e.refresh) {
		return e.token, nil
	}
	exp := int64(3600)
	if src.ExpirationSeconds != nil {
		exp = *src.ExpirationSeconds
	}
	var aud []string
	if src.Audience != "" {
		aud = []string{src.Audience}
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := w.k.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         aud,
			ExpirationSeconds: &exp,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("service account token for %q: %w", sa, err)
	}
	life := time.Until(tr.Status.ExpirationTimestamp.Time)
	if life > 24*time.Hour {
		life = 24 * time.Hour
	}
	w.tokens[key] = tokenCacheEntry{token: []byte(tr.Status.Token), refresh: time.Now().Add(life * 8 / 10)}
	return []byte(tr.Status.Token), nil
}

// syncDir makes dir contain exactly files (nested paths allowed). Files are
// replaced atomically and only when their content or mode changed.
func syncDir(dir string, files fileSet) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	want := map[string]bool{}
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		fc := files[p]
		clean := filepath.Clean("/" + p)[1:]
		if clean == "" {
			continue
		}
		want[clean] = true
		full := filepath.Join(dir, clean)
		if old, err := os.ReadFile(full); err == nil && bytes.Equal(old, fc.data) {
			if st, err := os.Stat(full); err == nil && st.Mode().Perm() == fc.mode {
				continue
			}
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		tmp := full + ".testenv-tmp"
		if err := os.WriteFile(tmp, fc.data, fc.mode); err != nil {
			return err
		}
		os.Chmod(tmp, fc.mode)
		if err := os.Rename(tmp, full); err != nil {
			return err
		}
	}
	// prune files no longer present
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		if !want[rel] {
			os.Remove(path)
		}
		return nil
	})
	return nil
}

// setupRoot lays out a container's root: a symlink per volumeMount.
func (w *podWorker) setupRoot(c *corev1.Container) (string, error) {
	root := filepath.Join(w.dir, "root", c.Name)
	if err := os.MkdirAll(filepath.Join(root, "home"), 0o755); err != nil {
		return "", err
	}
	mounts := append([]corev1.VolumeMount(nil), c.VolumeMounts...)
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].MountPath) < len(mounts[j].MountPath) })
	for _, m := range mounts {
		target := w.volumeDir(m.Name)
		if m.SubPath != "" {
			target = filepath.Join(target, m.SubPath)
		} else if m.SubPathExpr != "" {
			target = filepath.Join(target, os.Expand(m.SubPathExpr, func(string) string { return "" }))
		}
		link := filepath.Join(root, filepath.Clean("/"+m.MountPath))
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return "", err
		}
		if cur, err := os.Readlink(link); err == nil && cur == target {
			continue
		}
		os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return "", err
		}
	}
	return root, nil
}

// pathRewriter rewrites absolute container paths (volume mountPaths) in
// strings to their place under the container's root.
type pathRewriter struct {
	root   string
	prefix []string // longest first
}

func newPathRewriter(root string, c *corev1.Container) *pathRewriter {
	r := &pathRewriter{root: root}
	for _, m := range c.VolumeMounts {
		p := filepath.Clean("/" + m.MountPath)
		if p != "/" {
			r.prefix = append(r.prefix, p)
		}
	}
	sort.Slice(r.prefix, func(i, j int) bool { return len(r.prefix[i]) > len(r.prefix[j]) })
	return r
}

func isPathBoundaryBefore(b byte) bool {
	return b == '=' || b == ',' || b == ':' || b == ' ' || b == '"' || b == '\''
}

func isPathBoundaryAfter(b byte) bool {
	return b == '/' || b == ',' || b == ':' || b == ' ' || b == '"' || b == '\'' || b == ';'
}

// rewrite replaces every occurrence of a mountPath that starts the string or
// follows '=', ',', ':', ' ' or a quote, and ends the string or is followed by
// '/', ',', ':', ';', ' ' or a quote.
func (r *pathRewriter) rewrite(s string) string {
	if len(r.prefix) == 0 || !strings.Contains(s, "/") {
		return s
	}
	var out strings.Builder
	i := 0
	for i < len(s) {
		matched := false
		if i == 0 || isPathBoundaryBefore(s[i-1]) {
			for _, p := range r.prefix {
				if strings.HasPrefix(s[i:], p) {
					end := i + len(p)
					if end == len(s) || isPathBoundaryAfter(s[end]) {
						out.WriteString(r.root)
						out.WriteString(p)
						i = end
						matched = true
						break
					}
				}
			}
		}
		if !matched {
			out.WriteByte(s[i])
			i++
		}
	}
	return out.String()
}

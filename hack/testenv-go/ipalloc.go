package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
)

// ipAllocator hands out loopback addresses as Pod IPs, round robin over the
// range so a released address is not reused at once.
type ipAllocator struct {
	mu          sync.Mutex
	first, last uint32
	next        uint32
	used        map[uint32]bool
}

func newIPAllocator(r string) (*ipAllocator, error) {
	a, b, ok := strings.Cut(r, "-")
	if !ok {
		return nil, fmt.Errorf("pod IP range %q: want FIRST-LAST", r)
	}
	fi, li := net.ParseIP(strings.TrimSpace(a)).To4(), net.ParseIP(strings.TrimSpace(b)).To4()
	if fi == nil || li == nil || !fi.IsLoopback() || !li.IsLoopback() {
		return nil, fmt.Errorf("pod IP range %q: both ends must be IPv4 loopback addresses", r)
	}
	f, l := binary.BigEndian.Uint32(fi), binary.BigEndian.Uint32(li)
	if l < f {
		return nil, fmt.Errorf("pod IP range %q is empty", r)
	}
	return &ipAllocator{first: f, last: l, next: f, used: map[uint32]bool{}}, nil
}

func (a *ipAllocator) allocate() (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.last - a.first + 1
	for i := uint32(0); i < n; i++ {
		c := a.next
		a.next++
		if a.next > a.last {
			a.next = a.first
		}
		// skip x.x.x.0, x.x.x.255 and 127.0.0.1
		if c&0xff == 0 || c&0xff == 0xff || c == 0x7f000001 {
			continue
		}
		if !a.used[c] {
			a.used[c] = true
			ip := make(net.IP, 4)
			binary.BigEndian.PutUint32(ip, c)
			return ip.String(), nil
		}
	}
	return "", fmt.Errorf("no free pod IP in the range")
}

func (a *ipAllocator) release(ip string) {
	p := net.ParseIP(ip).To4()
	if p == nil {
		return
	}
	a.mu.Lock()
	delete(a.used, binary.BigEndian.Uint32(p))
	a.mu.Unlock()
}

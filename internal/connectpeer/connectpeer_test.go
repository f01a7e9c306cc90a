package connectpeer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestResolveConcurrent: callers that resolve the same pom at once (test
// binaries of parallel CI lanes share the cache) all get the one
// complete directory. A fake mvn makes them overlap for certain: each
// waits until every caller has started it before it writes its jar.
func TestResolveConcurrent(t *testing.T) {
	const n = 4
	bin, barrier, cache := t.TempDir(), t.TempDir(), t.TempDir()
	script := fmt.Sprintf(`#!/bin/sh
out=""
for a in "$@"; do case "$a" in -DoutputDirectory=*) out="${a#-DoutputDirectory=}";; esac; done
touch "%s/$$"
i=0
while [ "$(ls "%s" | wc -l)" -lt %d ]; do
	i=$((i+1)); [ $i -gt 6000 ] && { echo "fake mvn: the other callers never started" >&2; exit 1; }
	sleep 0.01
done
echo jar > "$out/dep.jar"
`, barrier, barrier, n)
	if err := os.WriteFile(filepath.Join(bin, "mvn"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("TXSINK_BENCH_CACHE", cache)
	pom := filepath.Join(t.TempDir(), "pom.xml")
	if err := os.WriteFile(pom, []byte("<project/>"), 0o644); err != nil {
		t.Fatal(err)
	}
	dirs, errs := make([]string, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { dirs[i], errs[i] = ResolvePlugin(context.Background(), pom, "x") })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if dirs[i] != dirs[0] {
			t.Fatalf("caller %d got %s, caller 0 %s", i, dirs[i], dirs[0])
		}
	}
	for _, f := range []string{".complete", "x/dep.jar"} {
		if _, err := os.Stat(filepath.Join(dirs[0], f)); err != nil {
			t.Errorf("the resolved directory lacks %s: %v", f, err)
		}
	}
	left, _ := os.ReadDir(cache)
	if len(left) != 1 {
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		t.Errorf("the cache holds %v, want only the resolved directory", names)
	}
}

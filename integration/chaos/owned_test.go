package chaos

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWorkerOwned reads the current incarnation's partitions from a log
// shaped like txsink's: an earlier incarnation's and revoked partitions do
// not count.
func TestWorkerOwned(t *testing.T) {
	dir := t.TempDir()
	log := `
=== incarnation 1 2026-12-01T21:17:31Z failpoint=""
time=x level=INFO msg="partitions assigned and fenced" connector=c task=0 positions="c[5]=0(fence 1)"
=== incarnation 2 2026-12-01T21:17:45Z failpoint="after-decide:1:stop"
time=x level=INFO msg="partitions assigned and fenced" connector=c task=0 positions="c[1]=0(fence 2) c[2]=7(fence 3)"
time=x level=INFO msg="partitions assigned and fenced" connector=c task=0 positions=c[0]=25(fence 4)
time=x level=INFO msg="partitions revoked" connector=c task=0 topic=c partitions="[1 2]"
time=x level=INFO msg="partitions assigned and fenced" connector=c task=0 positions="c[2]=9(fence 5)"
`
	if err := os.WriteFile(filepath.Join(dir, "eo-w1.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	w := &worker{logDir: dir, logName: "eo-w1"}
	got, err := w.owned()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0] || !got[2] {
		t.Fatalf("owned = %v, want partitions 0 and 2", got)
	}
	for gid, want := range map[string]int32{"txsink1_a548d2dc8b3a1448_a548d2dc8b3a1448_2_37_38": 2, "txsink1_aa_bb_11_0_9": 11} {
		if p, ok := gidPartition(gid); !ok || p != want {
			t.Errorf("gidPartition(%s) = %d, %t; want %d", gid, p, ok, want)
		}
	}
	if _, ok := gidPartition("other_1_2"); ok {
		t.Error("gidPartition accepted a foreign gid")
	}
}

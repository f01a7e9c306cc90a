package main

import (
	"os"
	"strconv"
	"strings"
)

// machineBusy returns the CPU seconds all cores of the machine have spent
// busy since boot (user, nice, system, irq, softirq, steal from the "cpu"
// line of /proc/stat, in USER_HZ = 100 ticks), or 0 where /proc/stat cannot
// be read. Differences over a measured window give the whole machine's CPU
// cost of that window: the sink, the broker, the database and the kernel.
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks float64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return 0
		}
		ticks += v
	}
	return ticks / 100
}

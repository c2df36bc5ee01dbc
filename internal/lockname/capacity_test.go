package lockname

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A bounded node's name declares its weight and capacity, and parses back.
func TestCapacityNames(t *testing.T) {
	p := CapacityPrefix("/locks/x", guid, 3, 4)
	name := strings.TrimPrefix(p, "/locks/x/") + "0000000042"
	assert.Equal(t, "_c_"+guid+"-sem-3of4-0000000042", name)
	n, ok := Parse(name)
	require.True(t, ok)
	assert.Equal(t, Node{Name: name, Seq: 42, Family: Native, Ours: true, Protected: true,
		Marker: capacityIndex, Weight: 3, Capacity: 4}, n)
	assert.Equal(t, "sem-3of4-0000000042", n.Bare())
	n, ok = Parse("_c_" + guid + "-sem-4of4--000000007")
	require.True(t, ok)
	assert.Equal(t, int32(-7), n.Seq)
	assert.True(t, n.Write, "a node that takes every permit is a writer's")

	for _, bad := range []string{
		"_c_" + guid + "-sem-0000000042",               // no weight
		"_c_" + guid + "-sem-0of4-0000000042",          // weight 0
		"_c_" + guid + "-sem-5of4-0000000042",          // past the capacity
		"_c_" + guid + "-sem-01of4-0000000042",         // a leading zero
		"_c_" + guid + "-sem-1of1000000000-0000000042", // past MaxCapacity
		"_c_" + guid + "-sem-1of-0000000042",
		"_c_" + guid + "-sem-1x4-0000000042",
		"sem-1of4-0000000042", // unprotected
		"_c_" + guid + "-sem-+1of4-0000000042",
	} {
		_, ok := Parse(bad)
		assert.False(t, ok, bad)
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { Parse(name) }))
}

// Curator's semaphore is recognised by its directories and its leases, and
// no family's lock counts a lease.
func TestCuratorSemaphore(t *testing.T) {
	assert.True(t, CuratorSemaphore("leases"))
	assert.True(t, CuratorSemaphore("locks"))
	assert.False(t, CuratorSemaphore("lease"))
	n, ok := Parse("_c_0f8ad5c2-3bd6-4b49-a0a3-6c6b5e0e9a7b-lease-0000000003")
	require.True(t, ok)
	assert.Equal(t, LeaseMarker(), n.Marker)
	assert.False(t, n.Ours)
	assert.Zero(t, Markers[n.Marker].SeenBy)
}

// Package qos is Basin's Linux traffic-control driver (docs/architecture.md): it
// turns a desired tree of HTB classes (project → pool → volume, rates in wire bytes
// per second, each volume leaf listing its endpoint addresses) into tc state on one
// link, a network sandbox's eth0, and reads it back with its counters.
//
// Both directions of the link are redirected into one IFB, so a single HTB tree sees
// reads (classified by source address) and writes (destination address) and a
// project's cap covers both. HTB's measured traps are built in
// (docs/architecture.md, "HTB's traps, built in"): explicit burst/cburst (10 ms of
// rate, at least 32 KiB: Burst), an explicit quantum (Quantum), pfifo leaves of 1000
// packets, unclassified traffic in a default class of its own outside the tree, and
// Validate refuses a tree whose children's rates exceed their parent's (HTB would
// not enforce the parent's ceiling). Addresses are looked up in u32 hash tables (256
// buckets on the last octet, one per direction), so a packet's cost does not grow
// with the number of volumes.
//
// A tour:
//   - tree.go: Class, Tree, Validate, the Driver interface.
//   - plan.go: Plan, the pure difference between a live and a desired tree as a list
//     of Changes (a rate change is one in-place change), and Burst/Quantum.
//   - netlink.go: the driver, over rtnetlink (no tc processes). It keeps per link
//     the classid of each Key and the filter handle of each address in memory; with
//     no memory of a shaped link (Basin restarted) it adopts the link from its state
//     file (state.go), or rebuilds it from scratch.
//     Counters reads a link's classes in one dump, and what each address sent in
//     another: HTB counts a class's two directions together, so each address's
//     outgoing packets reach the IFB through a redirect of their own on the link's
//     egress, whose action counts them.
//   - state.go: the driver's memory of a link kept in a file (StateDir), and the
//     check that the kernel holds exactly what a file records before a driver
//     with no memory of the link adopts it.
//   - counters.go: Between, what a class did over an interval from two reads of its
//     counters: wire bytes sent and received, drops, and the share of the interval
//     it spent held at its ceiling (from its overlimits, TestRootAtCeiling).
//   - fake: an in-memory Driver recording each Apply's Changes, for controller tests.
//
// Imported by the daemon and the controller; it imports no Basin package.
package qos

package agentconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
)

// Provenance layers: where a merged value came from.
const (
	LayerEnvironment             = "environment"
	LayerHost                    = "host"
	LayerHostReplacedEnvironment = "host_replaced_environment"
)

// Provenance says, for each unit the merge works on, which layer supplied it. Units are top-level keys
// ("metrics"), list entries by identity ("collectors[mysql/primary]", "dynamic[hostname]",
// "files[syslog]") and the keys of nested shallow objects ("static.env", "journald.units"). Removed
// lists environment entries that a host override deleted (collectors with "enabled": false).
type Provenance struct {
	Entries []ProvenanceEntry `json:"entries"`
	Removed []ProvenanceEntry `json:"removed,omitempty"`
}

// ProvenanceEntry is one unit of a Provenance. Layer is LayerEnvironment, LayerHost or
// LayerHostReplacedEnvironment.
type ProvenanceEntry struct {
	Path  string `json:"path"`
	Layer string `json:"layer"`
}

// Merge combines an environment config with a host override by the type's strategy:
//
//   - shallow types: host top-level keys replace environment keys, environment-only keys stay, nested
//     values are replaced whole;
//   - collectors: entries are identified by {type, name}; the environment list keeps its order, a host
//     entry replaces the matching entry in place or is appended, and a host entry with
//     "enabled": false removes the matching entry (and never appears itself);
//   - labels: static merges shallowly, dynamic merges by name (replace in place, append new), other keys
//     shallow;
//   - log_collection: files merge by name, journald shallowly (host units replace environment units),
//     other keys shallow.
//
// A missing layer (nil, empty or JSON null) leaves the other one as-is: Merge(t, env, nil) returns env
// and Merge(t, nil, host) returns host unchanged. When both are present the result is compact JSON that
// keeps member order and copies values verbatim. Both layers must be JSON of the type's shape (an array
// for collectors, an object otherwise); nested values of an unexpected kind merge shallowly.
func Merge(configType string, env, host json.RawMessage) (json.RawMessage, Provenance, error) {
	t, ok := registry[configType]
	if !ok {
		return nil, Provenance{}, unknownType(configType)
	}
	hasEnv, hasHost := !IsNull(env), !IsNull(host)
	if !hasEnv && !hasHost {
		return nil, Provenance{Entries: []ProvenanceEntry{}}, nil
	}
	rootKind, shape := kindObject, "an object"
	if t.root.kind == ruleList {
		rootKind, shape = kindArray, "an array"
	}
	m := mergers.Get().(*merger)
	defer m.release()
	envRoot, hostRoot := int32(-1), int32(-1)
	if hasEnv {
		m.env = &m.envDoc
		var err error
		if envRoot, err = m.env.parse(env); err != nil {
			return nil, Provenance{}, fmt.Errorf("agentconfig: merge %s: environment layer: %w", configType, err)
		}
	}
	if hasHost {
		m.host = &m.hostDoc
		var err error
		if hostRoot, err = m.host.parse(host); err != nil {
			return nil, Provenance{}, fmt.Errorf("agentconfig: merge %s: host layer: %w", configType, err)
		}
	}
	if !hasEnv || !hasHost {
		// One layer: used as-is. Walk it only to describe where it came from.
		m.discard = true
		data, d, root := env, m.env, envRoot
		if !hasEnv {
			data, d, root = host, m.host, hostRoot
		}
		if d.nodes[root].kind == rootKind {
			t.merge(m, envRoot, hostRoot)
		}
		return data, m.provenance(), nil
	}
	if m.env.nodes[envRoot].kind != rootKind {
		return nil, Provenance{}, fmt.Errorf("agentconfig: merge %s: environment layer is not %s", configType, shape)
	}
	if m.host.nodes[hostRoot].kind != rootKind {
		return nil, Provenance{}, fmt.Errorf("agentconfig: merge %s: host layer is not %s", configType, shape)
	}
	// Written to a buffer kept in the pool, then copied out at its exact size: a bound known before
	// writing (the two layers' sizes) usually falls in a larger size class of the allocator, and the
	// bytes allocated per merge set how often the garbage collector runs.
	m.out = m.outBuf[:0]
	t.merge(m, envRoot, hostRoot)
	m.outBuf = m.out
	return bytes.Clone(m.out), m.provenance(), nil
}

var mergers = sync.Pool{New: func() any { return new(merger) }}

// release resets m, keeping its buffers, and returns it to the pool.
func (m *merger) release() {
	if cap(m.envDoc.nodes) > 1<<16 || cap(m.hostDoc.nodes) > 1<<16 || cap(m.paths) > 1<<16 || cap(m.outBuf) > 1<<20 {
		return // let the garbage collector have an unusually large merge
	}
	m.envDoc.reset()
	m.hostDoc.reset()
	*m = merger{
		envDoc:  m.envDoc,
		hostDoc: m.hostDoc,
		outBuf:  m.outBuf[:0],
		paths:   m.paths[:0],
		entries: m.entries[:0],
		removed: m.removed[:0],
	}
	mergers.Put(m)
}

// merger writes a merged document and records its provenance. Node index -1 means "this layer has no
// value here". Provenance paths are appended back to back to one buffer and cut into strings at the
// end; with the parsed layers, that buffer is reused through a pool, so a merge allocates its result
// and little else.
type merger struct {
	envDoc, hostDoc document
	env, host       *document // &envDoc / &hostDoc when that layer is present
	out             []byte
	outBuf          []byte // out's array, kept in the pool
	discard         bool   // describe only: the output is one layer as-is
	paths           []byte
	entries         []provRef
	removed         []provRef
}

type provRef struct {
	start, end int
	layer      layerID
}

// layerID names a provenance layer by its index in layerNames. provRef holds it rather than the name:
// m.entries is in the heap, and storing a string there costs a write barrier while the garbage
// collector marks.
type layerID uint8

const (
	layerEnvironment layerID = iota
	layerHost
	layerHostReplacedEnvironment
)

var layerNames = [...]string{
	layerEnvironment:             LayerEnvironment,
	layerHost:                    LayerHost,
	layerHostReplacedEnvironment: LayerHostReplacedEnvironment,
}

func (m *merger) write(c byte) {
	if !m.discard {
		m.out = append(m.out, c)
	}
}

func (m *merger) writeRaw(b []byte) {
	if !m.discard {
		m.out = append(m.out, b...)
	}
}

func (m *merger) writeValue(d *document, i int32) {
	if !m.discard {
		m.out = d.appendCompact(m.out, i)
	}
}

// layerDoc returns the document of a value: the host's if it has one here, else the environment's.
func (m *merger) layerDoc(host int32) *document {
	if host >= 0 {
		return m.host
	}
	return m.env
}

func (m *merger) record(start int, layer layerID) {
	m.entries = append(m.entries, provRef{start: start, end: len(m.paths), layer: layer})
}

func (m *merger) recordRemoved(start int) {
	m.removed = append(m.removed, provRef{start: start, end: len(m.paths), layer: layerHost})
}

func (m *merger) provenance() Provenance {
	all := string(m.paths)
	p := Provenance{Entries: make([]ProvenanceEntry, len(m.entries))}
	for i, r := range m.entries {
		p.Entries[i] = ProvenanceEntry{Path: all[r.start:r.end], Layer: layerNames[r.layer]}
	}
	if len(m.removed) > 0 {
		p.Removed = make([]ProvenanceEntry, len(m.removed))
		for i, r := range m.removed {
			p.Removed[i] = ProvenanceEntry{Path: all[r.start:r.end], Layer: layerNames[r.layer]}
		}
	}
	return p
}

// layerOf names the provenance layer of a unit present in env and/or host.
func layerOf(env, host int32) layerID {
	switch {
	case env >= 0 && host >= 0:
		return layerHostReplacedEnvironment
	case host >= 0:
		return layerHost
	default:
		return layerEnvironment
	}
}

// nested is a top-level key whose value has its own merge rule, used when every layer that has the key
// holds a value of the expected kind. Otherwise the key merges shallowly like any other.
type nested struct {
	key   string
	kind  kind
	merge func(m *merger, env, host int32)
}

func mergeShallow(m *merger, env, host int32) { m.object("", env, host, nil) }

var labelsNested = []nested{
	{key: "static", kind: kindObject, merge: func(m *merger, env, host int32) { m.object("static", env, host, nil) }},
	{key: "dynamic", kind: kindArray, merge: func(m *merger, env, host int32) { m.list(&dynamicLabelList, env, host) }},
}

func mergeLabels(m *merger, env, host int32) { m.object("", env, host, labelsNested) }

var logCollectionNested = []nested{
	{key: "files", kind: kindArray, merge: func(m *merger, env, host int32) { m.list(&logFileList, env, host) }},
	{key: "journald", kind: kindObject, merge: func(m *merger, env, host int32) { m.object("journald", env, host, nil) }},
}

func mergeLogCollection(m *merger, env, host int32) { m.object("", env, host, logCollectionNested) }

func mergeCollectors(m *merger, env, host int32) { m.list(&collectorList, env, host) }

// object merges two objects (either may be -1) key by key: environment keys in their order, each
// replaced by the host's value when the host has the key, then host-only keys in the host's order.
func (m *merger) object(prefix string, env, host int32, special []nested) {
	var envKids, hostKids []int32
	if env >= 0 {
		envKids = m.env.kidsOf(env)
	}
	if host >= 0 {
		hostKids = m.host.kidsOf(host)
	}
	var usedBuf [32]bool
	used := usedBuf[:0]
	if n := len(hostKids) / 2; n <= len(usedBuf) {
		used = usedBuf[:n]
	} else {
		used = make([]bool, n)
	}
	var index map[string]int
	if len(hostKids) > 2*16 && len(envKids) > 2*16 {
		index = make(map[string]int, len(hostKids)/2)
		for p := 0; p < len(hostKids); p += 2 {
			index[string(m.host.text(hostKids[p], nil))] = p / 2
		}
	}
	m.write('{')
	count := 0
	for j := 0; j < len(envKids); j += 2 {
		k := envKids[j]
		hv := int32(-1)
		if pos := m.findKey(k, hostKids, index); pos >= 0 {
			used[pos] = true
			hv = hostKids[2*pos+1]
		}
		m.member(prefix, m.env, k, envKids[j+1], hv, special, &count)
	}
	for pos, u := range used {
		if !u {
			m.member(prefix, m.host, hostKids[2*pos], -1, hostKids[2*pos+1], special, &count)
		}
	}
	m.write('}')
}

// findKey returns the member position in hostKids of environment key node k, or -1.
func (m *merger) findKey(k int32, hostKids []int32, index map[string]int) int {
	if index != nil {
		if pos, ok := index[string(m.env.text(k, nil))]; ok {
			return pos
		}
		return -1
	}
	for p := 0; p < len(hostKids); p += 2 {
		if m.env.sameString(m.host, k, hostKids[p]) {
			return p / 2
		}
	}
	return -1
}

// member writes one object member whose key node k lives in keyDoc.
func (m *merger) member(prefix string, keyDoc *document, k, env, host int32, special []nested, count *int) {
	if *count > 0 {
		m.write(',')
	}
	*count++
	m.writeRaw(keyDoc.raw(k))
	m.write(':')
	key := keyDoc.text(k, nil)
	for _, s := range special {
		if string(key) == s.key && (env < 0 || m.env.nodes[env].kind == s.kind) &&
			(host < 0 || m.host.nodes[host].kind == s.kind) {
			s.merge(m, env, host)
			return
		}
	}
	start := len(m.paths)
	m.paths = append(m.paths, prefix...)
	m.paths = appendPathKey(m.paths, key, prefix == "")
	m.record(start, layerOf(env, host))
	if host >= 0 {
		m.writeValue(m.host, host)
	} else {
		m.writeValue(m.env, env)
	}
}

// listRule describes an array merged by entry identity.
type listRule struct {
	prefix   string   // provenance path prefix: "collectors", "dynamic", "files"
	identity []string // string members that identify an entry (one or two)
	disable  bool     // a host entry with "enabled": false removes its match
}

var (
	collectorList    = listRule{prefix: "collectors", identity: []string{"type", "name"}, disable: true}
	dynamicLabelList = listRule{prefix: "dynamic", identity: []string{"name"}}
	logFileList      = listRule{prefix: "files", identity: []string{"name"}}
)

// listSlot is one entry of a list being merged.
type listSlot struct {
	doc      *document
	node     int32
	id       [2]int32 // identity value nodes in doc; id[0] < 0 when the entry has no identity
	idPrint  uint64   // identityPrint of id
	fromEnv  bool
	replaced bool
	removed  bool
}

// identity returns the identity value nodes of entry i of d: string members named by r.identity.
func (r *listRule) identityOf(d *document, i int32) [2]int32 {
	id := [2]int32{-1, -1}
	if d.nodes[i].kind != kindObject {
		return id
	}
	for p, name := range r.identity {
		v := d.member(i, name)
		if v < 0 || d.nodes[v].kind != kindString {
			return [2]int32{-1, -1}
		}
		id[p] = v
	}
	return id
}

// identityPrint summarizes identity id of an entry of d: equal identities have equal prints, so
// comparing prints first spares most comparisons of strings.
func (r *listRule) identityPrint(d *document, id [2]int32) uint64 {
	if id[0] < 0 {
		return 0
	}
	var f uint64
	for p := range r.identity {
		f = f*31 + d.fingerprint(id[p])
	}
	return f
}

func sameIdentity(r *listRule, a *document, ai [2]int32, b *document, bi [2]int32) bool {
	if ai[0] < 0 || bi[0] < 0 {
		return false
	}
	for p := range r.identity {
		if !a.sameString(b, ai[p], bi[p]) {
			return false
		}
	}
	return true
}

// isDisabled reports whether entry i of d is an object with "enabled": false.
func isDisabled(d *document, i int32) bool {
	if d.nodes[i].kind != kindObject {
		return false
	}
	v := d.member(i, "enabled")
	return v >= 0 && d.nodes[v].kind == kindFalse
}

// list merges two arrays (either may be -1) by entry identity. A host entry acts on every entry with
// its identity, so a list that (invalidly) repeats an identity still merges the same way twice.
func (m *merger) list(r *listRule, env, host int32) {
	if env < 0 || host < 0 {
		d, i := m.layerDoc(host), max(env, host)
		m.writeValue(d, i)
		layer := layerOf(env, host)
		for pos, e := range d.kidsOf(i) {
			m.record(m.entryPath(r, d, r.identityOf(d, e), pos), layer)
		}
		return
	}
	envKids, hostKids := m.env.kidsOf(env), m.host.kidsOf(host)
	var slotBuf [32]listSlot
	slots := slotBuf[:0]
	if n := len(envKids) + len(hostKids); n > len(slotBuf) {
		slots = make([]listSlot, 0, n)
	}
	for _, e := range envKids {
		id := r.identityOf(m.env, e)
		idPrint := r.identityPrint(m.env, id)
		slots = append(slots, listSlot{doc: m.env, node: e, id: id, idPrint: idPrint, fromEnv: true})
	}
	var index *identityIndex
	if len(envKids)*len(hostKids) > 1024 {
		index = newIdentityIndex(r, slots)
	}
	for _, h := range hostKids {
		id := r.identityOf(m.host, h)
		idPrint := r.identityPrint(m.host, id)
		disabled := r.disable && isDisabled(m.host, h)
		matched := false
		if index != nil {
			for _, s := range index.lookup(r, m.host, id) {
				matched = m.applyHostEntry(r, slots, s, h, id, idPrint, disabled) || matched
			}
		} else {
			for s := range slots {
				matched = m.applyHostEntry(r, slots, s, h, id, idPrint, disabled) || matched
			}
		}
		if !matched && !disabled {
			slots = append(slots, listSlot{doc: m.host, node: h, id: id, idPrint: idPrint})
			index.add(r, m.host, id, len(slots)-1)
		}
	}
	// Written to a local slice and stored back once, for the reason entryPath gives.
	out, write := m.out, !m.discard
	if write {
		out = append(out, '[')
	}
	pos := 0
	for _, s := range slots {
		if s.removed {
			continue
		}
		if write {
			if pos > 0 {
				out = append(out, ',')
			}
			out = s.doc.appendCompact(out, s.node)
		}
		start := m.entryPath(r, s.doc, s.id, pos)
		layer := layerHost
		switch {
		case s.fromEnv && s.replaced:
			layer = layerHostReplacedEnvironment
		case s.fromEnv:
			layer = layerEnvironment
		}
		m.record(start, layer)
		pos++
	}
	if write {
		out = append(out, ']')
	}
	m.out = out
}

// applyHostEntry applies host entry h (identity id, identityPrint idPrint) to slot s if they share an
// identity, and reports whether they did.
func (m *merger) applyHostEntry(r *listRule, slots []listSlot, s int, h int32, id [2]int32, idPrint uint64,
	disabled bool) bool {
	slot := &slots[s]
	if slot.removed || slot.idPrint != idPrint || !sameIdentity(r, slot.doc, slot.id, m.host, id) {
		return false
	}
	if disabled {
		slot.removed = true
		if slot.fromEnv {
			m.recordRemoved(m.entryPath(r, m.host, id, s))
		}
		return true
	}
	slot.doc, slot.node, slot.id, slot.replaced = m.host, h, id, true
	return true
}

// entryPath appends the provenance path of a list entry, "prefix[type/name]" (or "prefix[pos]" for an
// entry without identity), and returns where it starts.
//
// It appends to a local slice and stores it back once: m is in the heap, and every slice stored there
// costs a write barrier while the garbage collector marks (appending a slice stores the result even
// when it did not grow).
func (m *merger) entryPath(r *listRule, d *document, id [2]int32, pos int) int {
	paths := m.paths
	start := len(paths)
	paths = append(paths, r.prefix...)
	paths = append(paths, '[')
	if id[0] < 0 {
		paths = strconv.AppendInt(paths, int64(pos), 10)
	} else {
		for p := range r.identity {
			if p > 0 {
				paths = append(paths, '/')
			}
			paths = d.appendText(paths, id[p])
		}
	}
	keep(&m.paths, append(paths, ']'))
	return start
}

// identityIndex finds list slots by identity in large lists, where comparing every host entry with
// every slot would be quadratic. A nil index means "scan every slot".
type identityIndex struct {
	slots map[string][]int
	key   []byte
}

func newIdentityIndex(r *listRule, slots []listSlot) *identityIndex {
	x := &identityIndex{slots: make(map[string][]int, len(slots))}
	for i, s := range slots {
		x.add(r, s.doc, s.id, i)
	}
	return x
}

func (x *identityIndex) keyOf(r *listRule, d *document, id [2]int32) []byte {
	x.key = x.key[:0]
	for p := range r.identity {
		x.key = append(d.appendText(x.key, id[p]), 0)
	}
	return x.key
}

func (x *identityIndex) add(r *listRule, d *document, id [2]int32, slot int) {
	if x == nil || id[0] < 0 {
		return
	}
	k := x.keyOf(r, d, id)
	x.slots[string(k)] = append(x.slots[string(k)], slot)
}

// lookup returns the slots that have identity id.
func (x *identityIndex) lookup(r *listRule, d *document, id [2]int32) []int {
	if id[0] < 0 {
		return nil
	}
	return x.slots[string(x.keyOf(r, d, id))]
}

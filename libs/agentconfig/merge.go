package agentconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
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
	return merge(configType, env, host, true)
}

// merge is Merge. With stream unset it always parses both layers into trees (the tests compare the
// two ways of merging a list-rooted type).
func merge(configType string, env, host json.RawMessage, stream bool) (json.RawMessage, Provenance, error) {
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
	if stream && hasEnv && hasHost && t.root.kind == ruleList {
		if out, ok := m.streamedList(&collectorList, env, host); ok {
			return out, m.provenance(), nil
		}
		m.restart() // something unusual or invalid: the tree path below says what
	}
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
	m.out = make([]byte, 0, len(env)+len(host))
	t.merge(m, envRoot, hostRoot)
	return m.out, m.provenance(), nil
}

var mergers = sync.Pool{New: func() any { return new(merger) }}

// release resets m, keeping its buffers, and returns it to the pool.
func (m *merger) release() {
	if cap(m.envDoc.nodes) > 1<<16 || cap(m.hostDoc.nodes) > 1<<16 || cap(m.paths) > 1<<16 {
		return // let the garbage collector have an unusually large merge
	}
	if cap(m.envOut) > 1<<20 || cap(m.listOut) > 1<<20 {
		m.envOut, m.listOut = nil, nil
	}
	m.restart()
	mergers.Put(m)
}

// restart drops everything a merge has read or written so far, keeping the buffers.
func (m *merger) restart() {
	m.envDoc.reset()
	m.hostDoc.reset()
	*m = merger{
		envDoc:  m.envDoc,
		hostDoc: m.hostDoc,
		envOut:  m.envOut[:0],
		listOut: m.listOut[:0],
		paths:   m.paths[:0],
		entries: m.entries[:0],
		removed: m.removed[:0],
	}
}

// merger writes a merged document and records its provenance. Node index -1 means "this layer has no
// value here". Provenance paths are appended back to back to one buffer and cut into strings at the
// end; with the parsed layers, that buffer is reused through a pool, so a merge allocates its result
// and little else.
type merger struct {
	envDoc, hostDoc document
	env, host       *document // &envDoc / &hostDoc when that layer is present
	out             []byte
	envOut          []byte // streamedList: the environment entries, compact, back to back
	listOut         []byte // streamedList: the merged list, before it is copied out
	discard         bool   // describe only: the output is one layer as-is
	paths           []byte
	entries         []provRef
	removed         []provRef
}

type provRef struct {
	start, end int
	layer      string
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

func (m *merger) record(start int, layer string) {
	m.entries = append(m.entries, provRef{start: start, end: len(m.paths), layer: layer})
}

func (m *merger) recordRemoved(start int) {
	m.removed = append(m.removed, provRef{start: start, end: len(m.paths), layer: LayerHost})
}

func (m *merger) provenance() Provenance {
	all := string(m.paths)
	p := Provenance{Entries: make([]ProvenanceEntry, len(m.entries))}
	for i, r := range m.entries {
		p.Entries[i] = ProvenanceEntry{Path: all[r.start:r.end], Layer: r.layer}
	}
	if len(m.removed) > 0 {
		p.Removed = make([]ProvenanceEntry, len(m.removed))
		for i, r := range m.removed {
			p.Removed[i] = ProvenanceEntry{Path: all[r.start:r.end], Layer: r.layer}
		}
	}
	return p
}

// layerOf names the provenance layer of a unit present in env and/or host.
func layerOf(env, host int32) string {
	switch {
	case env >= 0 && host >= 0:
		return LayerHostReplacedEnvironment
	case host >= 0:
		return LayerHost
	default:
		return LayerEnvironment
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

// listSlot is one entry of a list being merged: node of doc, or, when doc is nil, an environment entry
// that streamedList wrote compact to envOut[span[0]:span[1]].
type listSlot struct {
	doc      *document
	node     int32
	span     [2]int32
	id       identity
	fromEnv  bool
	replaced bool
	removed  bool
}

// identity is the decoded text of the string members that identify a list entry (ok is false for an
// entry without them). Equal identities have equal prints, so comparing prints first spares most
// comparisons of strings.
type identity struct {
	text  [2][]byte
	print uint64
	ok    bool
}

// seal marks id, whose text is filled in, as an identity and computes its print.
func (id *identity) seal(r *listRule) {
	var f uint64
	for p := range r.identity {
		f = f*31 + fingerprintOf(id.text[p])
	}
	id.print, id.ok = f, true
}

// identityOf returns the identity of entry i of d: the string members named by r.identity.
func (r *listRule) identityOf(d *document, i int32) identity {
	if d.nodes[i].kind != kindObject {
		return identity{}
	}
	var id identity
	for p, name := range r.identity {
		v := d.member(i, name)
		if v < 0 || d.nodes[v].kind != kindString {
			return identity{}
		}
		id.text[p] = d.text(v, nil)
	}
	id.seal(r)
	return id
}

func sameIdentity(r *listRule, a, b *identity) bool {
	if !a.ok || !b.ok || a.print != b.print {
		return false
	}
	for p := range r.identity {
		if !bytes.Equal(a.text[p], b.text[p]) {
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
			id := r.identityOf(d, e)
			m.record(m.entryPath(r, &id, pos), layer)
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
		slots = append(slots, listSlot{doc: m.env, node: e, id: r.identityOf(m.env, e), fromEnv: true})
	}
	m.mergeList(r, slots, hostKids)
}

// mergeList applies the host entries hostKids to the environment entries in slots, in order, and
// writes the merged list.
func (m *merger) mergeList(r *listRule, slots []listSlot, hostKids []int32) {
	var index *identityIndex
	if len(slots)*len(hostKids) > 1024 {
		index = newIdentityIndex(r, slots)
	}
	for _, h := range hostKids {
		id := r.identityOf(m.host, h)
		disabled := r.disable && isDisabled(m.host, h)
		matched := false
		if index != nil {
			for _, s := range index.lookup(r, &id) {
				matched = m.applyHostEntry(r, slots, s, h, &id, disabled) || matched
			}
		} else {
			for s := range slots {
				matched = m.applyHostEntry(r, slots, s, h, &id, disabled) || matched
			}
		}
		if !matched && !disabled {
			slots = append(slots, listSlot{doc: m.host, node: h, id: id})
			index.add(r, &id, len(slots)-1)
		}
	}
	m.write('[')
	pos := 0
	for i := range slots {
		s := &slots[i]
		if s.removed {
			continue
		}
		if pos > 0 {
			m.write(',')
		}
		if s.doc == nil {
			m.writeRaw(m.envOut[s.span[0]:s.span[1]])
		} else {
			m.writeValue(s.doc, s.node)
		}
		start := m.entryPath(r, &s.id, pos)
		layer := LayerHost
		switch {
		case s.fromEnv && s.replaced:
			layer = LayerHostReplacedEnvironment
		case s.fromEnv:
			layer = LayerEnvironment
		}
		m.record(start, layer)
		pos++
	}
	m.write(']')
}

// applyHostEntry applies host entry h (identity id) to slot s if they share an identity, and reports
// whether they did.
func (m *merger) applyHostEntry(r *listRule, slots []listSlot, s int, h int32, id *identity, disabled bool) bool {
	slot := &slots[s]
	if slot.removed || !sameIdentity(r, &slot.id, id) {
		return false
	}
	if disabled {
		slot.removed = true
		if slot.fromEnv {
			m.recordRemoved(m.entryPath(r, id, s))
		}
		return true
	}
	slot.doc, slot.node, slot.id, slot.replaced = m.host, h, *id, true
	return true
}

// entryPath appends the provenance path of a list entry, "prefix[type/name]" (or "prefix[pos]" for an
// entry without identity), and returns where it starts.
func (m *merger) entryPath(r *listRule, id *identity, pos int) int {
	start := len(m.paths)
	m.paths = append(m.paths, r.prefix...)
	m.paths = append(m.paths, '[')
	if !id.ok {
		m.paths = strconv.AppendInt(m.paths, int64(pos), 10)
	} else {
		for p := range r.identity {
			if p > 0 {
				m.paths = append(m.paths, '/')
			}
			m.paths = append(m.paths, id.text[p]...)
		}
	}
	m.paths = append(m.paths, ']')
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
	for i := range slots {
		x.add(r, &slots[i].id, i)
	}
	return x
}

func (x *identityIndex) keyOf(r *listRule, id *identity) []byte {
	x.key = x.key[:0]
	for p := range r.identity {
		x.key = append(append(x.key, id.text[p]...), 0)
	}
	return x.key
}

func (x *identityIndex) add(r *listRule, id *identity, slot int) {
	if x == nil || !id.ok {
		return
	}
	k := x.keyOf(r, id)
	x.slots[string(k)] = append(x.slots[string(k)], slot)
}

// lookup returns the slots that have identity id.
func (x *identityIndex) lookup(r *listRule, id *identity) []int {
	if !id.ok {
		return nil
	}
	return x.slots[string(x.keyOf(r, id))]
}

// streamedList merges a list-rooted type (collectors) without a tree of the environment layer, usually
// the larger one: each environment entry is checked and written compact to envOut as it is read, and
// only its span and identity are kept; the host layer is parsed as usual. The entries then merge as in
// list. It reports false for input it leaves to the tree path: anything invalid (the tree path reports
// the error) and the rare valid input it does not handle (escaped keys or identity values, objects of
// more than 16 members, a host layer that is not an array).
func (m *merger) streamedList(r *listRule, env, host []byte) (json.RawMessage, bool) {
	if len(env) > math.MaxInt32 {
		return nil, false
	}
	m.host = &m.hostDoc
	hostRoot, err := m.host.parse(host)
	if err != nil || m.host.nodes[hostRoot].kind != kindArray {
		return nil, false
	}
	hostKids := m.host.kidsOf(hostRoot)
	w := entryWriter{p: parser{data: env}, out: m.envOut[:0]}
	defer func() { m.envOut = w.out }()
	var slotBuf [32]listSlot
	slots := slotBuf[:0]
	p := &w.p
	p.skipSpace()
	if p.pos >= len(env) || env[p.pos] != '[' {
		return nil, false
	}
	p.pos++
	p.skipSpace()
	if p.pos < len(env) && env[p.pos] == ']' {
		p.pos++
	} else {
		for {
			p.skipSpace()
			start := len(w.out)
			var id identity
			if p.pos < len(env) && env[p.pos] == '{' {
				if !w.object(2, r, &id) {
					return nil, false
				}
			} else if !w.value(1) {
				return nil, false
			}
			slots = append(slots, listSlot{span: [2]int32{int32(start), int32(len(w.out))}, id: id, fromEnv: true})
			if p.comma() {
				continue
			}
			p.skipSpace()
			closed, ok := p.compactSeparator(']')
			if !ok {
				return nil, false
			}
			if closed {
				break
			}
		}
	}
	p.skipSpace()
	if p.pos < len(env) {
		return nil, false
	}
	m.envOut = w.out
	// Written to a buffer kept in the pool, then copied to its exact size: a bound on the size, known
	// before writing, would often cross into the next size class of the allocator.
	m.out = m.listOut[:0]
	m.mergeList(r, slots, hostKids)
	m.listOut = m.out
	return bytes.Clone(m.out), true
}

// entryWriter checks JSON with the tree parser's scanners and limits and writes it as appendCompact
// writes the parsed value: tokens as they stand, without whitespace. It reports false for invalid
// input without saying why (the tree parser does), and for objects it does not handle: repeated keys
// are found by comparing raw keys, so it refuses escaped keys and more than 16 members.
type entryWriter struct {
	p   parser // only its scanners: p.d is nil
	out []byte
}

func (w *entryWriter) value(depth int) bool {
	p := &w.p
	if p.pos >= len(p.data) {
		return false
	}
	start := p.pos
	switch k := tokenKinds[p.data[start]]; k {
	case kindObject:
		return w.object(depth+1, nil, nil)
	case kindArray:
		return w.array(depth + 1)
	case kindString:
		if _, err := p.scanString(); err != nil {
			return false
		}
	case kindNumber:
		if p.scanNumber() != nil {
			return false
		}
	case noKind:
		return false
	default:
		if p.scanLiteral(k) != nil {
			return false
		}
	}
	w.out = append(w.out, p.data[start:p.pos]...)
	return true
}

func (w *entryWriter) array(depth int) bool {
	p := &w.p
	if depth > maxDepth {
		return false
	}
	p.pos++ // [
	w.out = append(w.out, '[')
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		w.out = append(w.out, ']')
		return true
	}
	for {
		p.skipSpace()
		if !w.value(depth) {
			return false
		}
		if !p.comma() {
			p.skipSpace()
			closed, ok := p.compactSeparator(']')
			if !ok {
				return false
			}
			if closed {
				w.out = append(w.out, ']')
				return true
			}
		}
		w.out = append(w.out, ',')
	}
}

// object checks and writes an object. With r set it also reads the entry's identity into *id.
func (w *entryWriter) object(depth int, r *listRule, id *identity) bool {
	p := &w.p
	if depth > maxDepth {
		return false
	}
	p.pos++ // {
	w.out = append(w.out, '{')
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		w.out = append(w.out, '}')
		return true
	}
	var keys [16][2]int32 // the text of each key, in p.data
	var prints [16]uint64
	n, found, bad := 0, 0, false
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' || n == len(keys) {
			return false
		}
		ks := p.pos
		if escaped, err := p.scanString(); err != nil || escaped {
			return false
		}
		ke := p.pos
		key := p.data[ks+1 : ke-1]
		f := fingerprintOf(key)
		for j := range n {
			if prints[j] == f && string(p.data[keys[j][0]:keys[j][1]]) == string(key) {
				return false // a repeated key
			}
		}
		prints[n], keys[n] = f, [2]int32{int32(ks + 1), int32(ke - 1)}
		n++
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return false
		}
		if p.pos == ke {
			w.out = append(w.out, p.data[ks:ke+1]...) // the key and its colon at once
		} else {
			w.out = append(w.out, p.data[ks:ke]...)
			w.out = append(w.out, ':')
		}
		p.pos++
		p.skipSpace()
		vs := p.pos
		if !w.value(depth) {
			return false
		}
		if r != nil {
			for q, name := range r.identity {
				if string(key) != name {
					continue
				}
				if p.data[vs] != '"' {
					bad = true
					break
				}
				text := p.data[vs+1 : p.pos-1]
				if bytes.IndexByte(text, '\\') >= 0 {
					return false // an escaped identity: the tree path decodes it
				}
				id.text[q] = text
				found++
			}
		}
		if !p.comma() {
			p.skipSpace()
			closed, ok := p.compactSeparator('}')
			if !ok {
				return false
			}
			if closed {
				break
			}
		}
		w.out = append(w.out, ',')
	}
	w.out = append(w.out, '}')
	if r != nil {
		if !bad && found == len(r.identity) {
			id.seal(r)
		} else {
			*id = identity{}
		}
	}
	return true
}

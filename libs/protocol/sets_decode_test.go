package protocol

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// refReply has ResolveSetsReply's fields and no methods: json.Unmarshal decodes it by reflection, the
// reference DecodeJSON must agree with.
type refReply ResolveSetsReply

// checkDecodeSame decodes data with decode and with reference, encoding/json's reflection (each into a
// copy of into): both refuse it, or both accept it with the same result; decode never panics.
func checkDecodeSame[T any](t *testing.T, name string, into T, data []byte, decode, reference func(*T, []byte) error) {
	t.Helper()
	ref := into
	refErr := reference(&ref, data)
	got := into
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("%s panicked on %q: %v", name, data, p)
			}
		}()
		err = decode(&got, data)
	}()
	switch {
	case (err == nil) != (refErr == nil):
		t.Fatalf("%s(%q) error %v, encoding/json error %v", name, data, err, refErr)
	case err == nil && !reflect.DeepEqual(got, ref):
		t.Fatalf("%s(%q):\n got %#v\nwant %#v", name, data, got, ref)
	}
}

// checkDamaged runs check on data, on every prefix of it when prefixes is set (truncated input), and on
// 40 copies of it with one byte replaced by one of mutations.
func checkDamaged(t *testing.T, r *rand.Rand, data []byte, prefixes bool, mutations []byte, check func(*testing.T, []byte)) {
	t.Helper()
	check(t, data)
	if prefixes {
		for n := range data {
			check(t, data[:n])
		}
	}
	for range 40 {
		m := []byte(string(data))
		m[r.IntN(len(m))] = mutations[r.IntN(len(mutations))]
		check(t, m)
	}
}

// checkSame checks ResolveSetsReply.DecodeJSON against encoding/json, decoding into copies of into.
func checkSame(t *testing.T, into ResolveSetsReply, data []byte) {
	t.Helper()
	checkDecodeSame(t, "DecodeJSON", into, data, (*ResolveSetsReply).DecodeJSON,
		func(v *ResolveSetsReply, data []byte) error { return json.Unmarshal(data, (*refReply)(v)) })
}

func check(t *testing.T, data []byte) { t.Helper(); checkSame(t, ResolveSetsReply{}, data) }

// randomText mixes plain characters with those JSON escapes or encoding/json replaces.
func randomText(r *rand.Rand) string {
	pieces := []string{"a", "host-1", "é", "日本", "😀", `"`, `\`, "<", ">", "&", "\n", "\t", "\x00", "\x1f",
		"\u2028", "\u2029", "\x7f", "\xff", "\xed\xa0\x80", "/", " ", ""}
	var b strings.Builder
	for range r.IntN(5) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func randomBytes(r *rand.Rand) []byte {
	switch r.IntN(4) {
	case 0:
		return nil
	case 1:
		return []byte{}
	default:
		b := make([]byte, r.IntN(100))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
}

func randomSigned(r *rand.Rand) *Signed {
	if r.IntN(4) == 0 {
		return nil
	}
	keyID := "k-2026"
	if r.IntN(3) == 0 {
		keyID = randomText(r)
	}
	return &Signed{Statement: randomBytes(r), KeyID: keyID, Signature: randomBytes(r)}
}

// randomReply builds a reply with every field exercised: nil and empty lists, odd strings, signed
// statements or none, raw data of every JSON kind.
func randomReply(r *rand.Rand) ResolveSetsReply {
	raws := []string{`{"static":{"env":"prod"}}`, `null`, `[1,2.5e3,-0,true,false,null]`, `"s\u00e9\n"`, `{}`, `[]`, `{"a":{"b":[{"c":"\ud83d\ude00"}]}}`}
	strs := func() []string {
		if r.IntN(3) == 0 {
			return nil
		}
		out := []string{}
		for range r.IntN(4) {
			out = append(out, randomText(r))
		}
		return out
	}
	reply := ResolveSetsReply{Contract: r.IntN(3), Missing: strs(), Remaining: strs(), TrustedKeys: randomSigned(r)}
	if r.IntN(2) == 0 {
		reply.NextAfter = randomText(r)
	}
	if r.IntN(5) > 0 {
		reply.Configs = []EffectiveConfig{}
		for range r.IntN(5) {
			c := EffectiveConfig{ConfigType: randomText(r), ConfigData: json.RawMessage(raws[r.IntN(len(raws))]),
				Version: r.Int64() - r.Int64(), Source: randomText(r), Statement: randomSigned(r)}
			if r.IntN(2) == 0 {
				c.EnvironmentVersion, c.HostVersion = r.Int64N(100), r.Int64N(100)
				c.Provenance = json.RawMessage(raws[r.IntN(len(raws))])
			}
			if r.IntN(6) == 0 {
				c.ConfigData = nil
			}
			reply.Configs = append(reply.Configs, c)
		}
	}
	if r.IntN(5) > 0 {
		reply.Sets = []ConfigSet{}
		for range r.IntN(4) {
			s := ConfigSet{ClientID: randomText(r), EnvironmentID: randomText(r)}
			if r.IntN(4) > 0 {
				s.Configs = map[string]int{}
				for range r.IntN(4) {
					s.Configs[randomText(r)] = r.IntN(10) - 1
				}
			}
			if r.IntN(5) > 0 {
				s.Hosts = []SetHost{}
				for range r.IntN(6) {
					s.Hosts = append(s.Hosts, SetHost{HostID: randomText(r), AgentID: randomText(r), Identity: randomSigned(r)})
				}
			}
			reply.Sets = append(reply.Sets, s)
		}
	}
	if r.IntN(3) == 0 {
		reply.Failed = []AgentError{{AgentID: randomText(r), Error: Error{Code: randomText(r), Message: randomText(r), RetryAfterMS: r.Int64N(5000)}}}
	}
	return reply
}

// Whatever json.Marshal writes for a reply, DecodeJSON reads as encoding/json does; so does every
// prefix of it (truncated input) and every one-byte change of it.
func TestDecodeJSONMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 2026))
	mutations := []byte{'"', '\\', '{', '}', '[', ']', ',', ':', 'n', '0', '-', '.', 'e', ' ', 0, 0x80, 'x', 'A'}
	for i := range 300 {
		reply := randomReply(r)
		data, err := json.Marshal(reply)
		if err != nil {
			t.Fatal(err)
		}
		var back ResolveSetsReply
		if err := back.DecodeJSON(data); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		checkDamaged(t, r, data, i%10 == 0, mutations, check)
	}
}

func TestDecodeJSONEdgeCases(t *testing.T) {
	cases := []string{
		// accepted
		`{}`, `null`, ` null `, " \t\r\n{ \"contract\" : 1 , \"configs\" : [ ] , \"sets\" : [ ] } \n",
		`{"contract":1,"configs":null,"sets":null,"missing":null,"remaining":null,"failed":null,"trusted_keys":null,"next_after":null}`,
		`{"contract":null}`, `{"contract":-0}`, `{"contract":9223372036854775807}`,
		`{"CONTRACT":1,"Configs":[{"Config_Type":"labels"}],"nExt_aFter":"x"}`,
		`{"\u0063ontract":1,"next_\u0061fter":"\u00e9\ud83d\ude00\ud800x\udc00\\\/\b\f\n\r\t\""}`,
		`{"next_after":"` + "\xff\xfe\xed\xa0\x80 ok é" + `"}`,
		"{\"next_\u017fafter\":\"kelvin-like fold\",\"contract\u212a\":1}",
		`{"unknown":{"deep":[1,2,{"x":null}],"s":"\u1234"},"contract":1,"other":[true,false,null,-1.5e-3]}`,
		`{"configs":[null,{"config_data":null,"provenance":null,"statement":null},{"config_data":  {"a" : [1, 2]} ,"version":null}]}`,
		`{"configs":[{"config_type":"x","statement":{"statement":"","key_id":"k","signature":""}}]}`,
		`{"configs":[{"statement":{"statement":"aGVs\nbG8=","signature":"\u0061GVsbG8=","extra":1}}]}`,
		`{"configs":[{"statement":{"statement":[104,101,null,255],"signature":[]}}]}`,
		`{"configs":[{"statement":{"statement":"\n"}}]}`,
		`{"sets":[null,{"client_id":null,"configs":{"labels":null,"a":1},"hosts":[null,{"host_id":"h","identity":{}}]}]}`,
		`{"sets":[{"configs":{},"hosts":[]}],"missing":[],"remaining":[null,"a"]}`,
		`{"failed":[{"agent_id":"a","error":null},{"error":{"code":"x","message":"m","retry_after_ms":5,"x":[]}}]}`,
		`{"contract":1,"contract":2,"missing":["a","b"],"missing":["c"]}`,
		`{"sets":[{"configs":{"a":1}}],"sets":[{"configs":{"b":2}}]}`,
		`{"trusted_keys":{"key_id":"a"},"trusted_keys":{"statement":"AA=="}}`,
		// refused
		``, ` `, `n`, `nul`, `nullx`, `{`, `}`, `[]`, `"s"`, `1`, `true`, `{} {}`, `{}x`, `{,}`, `{"contract":1,}`,
		`{"contract"}`, `{"contract":}`, `{contract:1}`, `{'contract':1}`, `{"contract":1 "sets":[]}`,
		`{"contract":"1"}`, `{"contract":1.0}`, `{"contract":1e2}`, `{"contract":01}`, `{"contract":-}`, `{"contract":1.}`,
		`{"contract":9223372036854775808}`, `{"contract":true}`, `{"contract":[]}`, `{"contract":{}}`, `{"contract":+1}`,
		`{"configs":{}}`, `{"configs":[1]}`, `{"configs":["x"]}`, `{"configs":[{"version":"1"}]}`, `{"configs":[{"config_type":1}]}`,
		`{"configs":[{"statement":"x"}]}`, `{"configs":[{"statement":{"statement":"a"}}]}`, `{"configs":[{"statement":{"statement":"!!!!"}}]}`,
		`{"configs":[{"statement":{"statement":"aGVsbG8"}}]}`, `{"configs":[{"statement":{"statement":1}}]}`,
		`{"configs":[{"statement":{"statement":[256]}}]}`, `{"configs":[{"statement":{"statement":[-1]}}]}`,
		`{"configs":[{"statement":{"statement":[-0]}}]}`, `{"configs":[{"statement":{"statement":[1.5]}}]}`,
		`{"configs":[{"statement":{"key_id":7}}]}`, `{"configs":[{"config_data":}]}`, `{"configs":[{"config_data":nul}]}`,
		`{"sets":[{"configs":[]}]}`, `{"sets":[{"configs":{"a":"1"}}]}`, `{"sets":[{"configs":{"a":1.5}}]}`, `{"sets":[{"hosts":{}}]}`,
		`{"sets":[{"hosts":[{"host_id":1}]}]}`, `{"sets":[{"hosts":[{"identity":[]}]}]}`, `{"missing":[1]}`, `{"missing":"a"}`,
		`{"failed":[{"error":"x"}]}`, `{"failed":[{"error":{"retry_after_ms":"5"}}]}`, `{"next_after":1}`, `{"trusted_keys":true}`,
		`{"next_after":"a` + "\x01" + `"}`, `{"next_after":"a` + "\x1f" + `"}`, `{"next_after":"\n` + "\x1f" + `"}`, "{\"next_after\":\"\x7f\"}", `{"next_after":"\x"}`, `{"next_after":"\u12"}`, `{"next_after":"\u12g4"}`, `{"next_after":"abc`,
		`{"x":[1,]}`, `{"x":[,1]}`, `{"x":{"a"}}`, `{"x":tru}`, `{"x":fals}`, `{"x":-a}`, `{"x":1e}`, `{"x":1e+}`, `{"x":.5}`, "{\"x\":\x00}",
		`{"configs":[{"config_data":{"a":1,}}]}`, `{"configs":[{"provenance":[1 2]}]}`,
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		`{"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
		`{"x":` + strings.Repeat("[", 9990) + strings.Repeat("]", 9990) + `}`,
	}
	for _, c := range cases {
		check(t, []byte(c))
	}
}

// Decoding into a reply that already holds values merges as encoding/json does (duplicate members do
// the same within one reply).
func TestDecodeJSONIntoExisting(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for range 100 {
		first, second := randomReply(r), randomReply(r)
		a, _ := json.Marshal(first)
		b, _ := json.Marshal(second)
		var base ResolveSetsReply
		if err := base.DecodeJSON(a); err != nil {
			t.Fatal(err)
		}
		ref := refReply{}
		if err := json.Unmarshal(a, &ref); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(base, ResolveSetsReply(ref)) {
			t.Fatal("first decode differs")
		}
		// Each decodes the second reply into what it decoded the first into.
		if err := json.Unmarshal(b, &ref); err != nil {
			t.Fatal(err)
		}
		if err := base.DecodeJSON(b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(base, ResolveSetsReply(ref)) {
			t.Fatalf("second decode differs:\n got %#v\nwant %#v", base, ResolveSetsReply(ref))
		}
	}
}

// json.Unmarshal of a ResolveSetsReply goes through UnmarshalJSON (config-api's drift, tests), and an
// error never echoes the payload.
func TestUnmarshalResolveSetsReply(t *testing.T) {
	reply := benchReply(3)
	data, _ := json.Marshal(reply)
	var got ResolveSetsReply
	if err := json.Unmarshal(data, &got); err != nil || !reflect.DeepEqual(got, reply) {
		t.Fatalf("json.Unmarshal: %v", err)
	}
	err := got.DecodeJSON([]byte(`{"next_after":"s3cret-value","contract":"s3cret-value"}`))
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %v", err)
	}
}

func FuzzDecodeJSON(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10 {
		data, _ := json.Marshal(randomReply(r))
		f.Add(data)
	}
	f.Add([]byte(`{"configs":[{"statement":{"statement":[1,2]}}],"CONTRACT":1,"x":[{"y":null}]}`))
	f.Fuzz(func(t *testing.T, data []byte) { check(t, data) })
}

// benchReply is the reply to a batch of agents of one environment with signing on, as the resolver
// makes it: one set, every host with its identity statement, every config with its statement.
func benchReply(agents int) ResolveSetsReply {
	sig := make([]byte, 64)
	for i := range sig {
		sig[i] = byte(i * 7)
	}
	const env = "5f0c1c1e-0000-4000-8000-000000000002"
	reply := ResolveSetsReply{Contract: ResolveSetsContract, Configs: []EffectiveConfig{},
		TrustedKeys: &Signed{Statement: []byte(`{"keys":[{"id":"k-2026","public_key":"MCowBQYDK2VwAyEA"}],"kind":"trusted_keys","version":3}`), KeyID: "k-2026", Signature: sig}}
	set := ConfigSet{ClientID: "5f0c1c1e-0000-4000-8000-000000000001", EnvironmentID: env, Configs: map[string]int{}}
	for i, typ := range []string{"collectors", "intervals", "labels", "healthcheck", "agent_settings", "log_shipping"} {
		set.Configs[typ] = i
		reply.Configs = append(reply.Configs, EffectiveConfig{ConfigType: typ,
			ConfigData: json.RawMessage(`{"static":{"env":"prod","team":"payments","region":"eu-west-1"},"dynamic":[]}`),
			Version:    int64(100 + i), Source: "environment", EnvironmentVersion: int64(100 + i),
			Statement: &Signed{Statement: []byte(`{"config_type":"` + typ + `","data_sha256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","kind":"config","scope":{"environment_id":"` + env + `"},"version":` + fmt.Sprint(100+i) + `}`),
				KeyID: "k-2026", Signature: sig}})
	}
	for i := range agents {
		agent := fmt.Sprintf("lg-20261202t114455-6948-%06d", i)
		set.Hosts = append(set.Hosts, SetHost{HostID: fmt.Sprintf("5f0c1c1e-0000-4000-8000-%012d", i), AgentID: agent,
			Identity: &Signed{Statement: []byte(`{"agent_id":"` + agent + `","environment_id":"` + env + `","kind":"identity"}`),
				KeyID: "k-2026", Signature: sig}})
	}
	reply.Sets = []ConfigSet{set}
	return reply
}

// benchDecode runs decode, one decode of a size-byte value into a fresh value, as the benchmark's op,
// and reports its throughput, allocations and the process's CPU time per op.
func benchDecode(b *testing.B, size int, decode func() error) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if err := decode(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime is this process's CPU time (user and system, GC included): on a shared machine it varies
// less than the wall time per op.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// specialWord flags a word exactly when one of its bytes is not plain.
func TestSpecialWord(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 200000 {
		var w [8]byte
		for k := range w {
			w[k] = byte('a' + r.IntN(26))
		}
		// every byte value at every position, then random words
		if i < 256*8 {
			w[i/256] = byte(i % 256)
		} else {
			for k := range w {
				if r.IntN(4) == 0 {
					w[k] = byte(r.Uint32())
				}
			}
		}
		want := false
		for _, c := range w {
			want = want || !plainByte[c]
		}
		x := uint64(0)
		for k := 7; k >= 0; k-- {
			x = x<<8 | uint64(w[k])
		}
		if got := specialWord(x); got != want {
			t.Fatalf("specialWord(%q) = %v", w, got)
		}
	}
}

package jsrun

import "testing"

// BenchmarkValueRoundTrip sends a record-like value (200 objects of five
// keys, a nested array, a typed array over part of a buffer) to a host
// function and back, and returns it: the serializer, the Go decoder and
// encoder and the guest deserializer on the paths issue 10 changed (key
// order, views over shared buffers).
func BenchmarkValueRoundTrip(b *testing.B) {
	benchSource(b, `const rows = [];
		for (let i = 0; i < 200; i++) rows.push({id: i, name: 'row ' + i, tags: ['a', 'b'], score: i / 3, ok: i % 2 === 0});
		const buf = new ArrayBuffer(1024);
		const v = {rows, bytes: new Uint8Array(buf, 16, 512), all: new Uint8Array(buf)};
		const back = await host.echo(v);
		return back.rows.length`)
}

// BenchmarkDecodeObjects compares decoding 200 five-key objects into maps
// (the default) and into *Object (Config.OrderedObjects), and encoding
// them back.
func BenchmarkDecodeObjects(b *testing.B) {
	rows := make([]any, 200)
	for i := range rows {
		rows[i] = NewObject("id", float64(i), "name", "row", "tags", []any{"a", "b"}, "score", 1.5, "ok", true)
	}
	wire, err := EncodeValue(rows)
	if err != nil {
		b.Fatal(err)
	}
	for _, ordered := range []bool{false, true} {
		name := "maps"
		if ordered {
			name = "ordered"
		}
		b.Run(name+"/decode", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := decodeWireAs(wire, ordered); err != nil {
					b.Fatal(err)
				}
			}
		})
		v, _ := decodeWireAs(wire, ordered)
		b.Run(name+"/encode", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := EncodeValue(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

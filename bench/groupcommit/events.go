package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
)

// orderCreatedSchema is what the validated target checks every
// orders.created event against: a realistic order-created event. Its
// "format" is an annotation only (draft 2020-12 does not assert it).
//
// internal/validate's BenchmarkCheck reads the same file.
//
//go:embed order-created.schema.json
var orderCreatedSchema string

type orderItem struct {
	SKU   string  `json:"sku"`
	Qty   int     `json:"qty"`
	Price float64 `json:"price"`
}

type orderCreated struct {
	OrderID  string      `json:"order_id"`
	Amount   float64     `json:"amount"`
	Currency string      `json:"currency"`
	Items    []orderItem `json:"items"`
	Customer struct {
		ID    string `json:"id"`
		Email string `json:"email"`
	} `json:"customer"`
	Notes string `json:"notes"`
}

// events returns the payloads of a cell with events of size bytes: 1,000 orders' order-created
// events, valid against orderCreatedSchema, each with 1 to 8 items (fewer when they do not fit) and
// a notes field that pads it to exactly size bytes; orders is true. Below the smallest such event
// (under 200 B) it returns the bench's earlier events, {"order_id":"o-N","pad":"xx…"}, which the
// schema refuses, and false.
func events(size int) (payloads [][]byte, orders bool) {
	payloads = make([][]byte, 1000)
	for i := range payloads {
		if payloads[i], orders = orderEvent(i, size); !orders {
			break
		}
	}
	if orders {
		return payloads, true
	}
	for i := range payloads {
		head := fmt.Sprintf(`{"order_id":"o-%d","pad":"`, i)
		payloads[i] = []byte(head + strings.Repeat("x", max(0, size-len(head)-2)) + `"}`)
	}
	return payloads, false
}

// orderEvent is order i's order-created event of exactly size bytes.
func orderEvent(i, size int) ([]byte, bool) {
	currencies := []string{"EUR", "USD", "GBP", "CHF", "JPY"}
	for n := 1 + i%8; n >= 1; n-- {
		e := orderCreated{OrderID: fmt.Sprintf("o-%d", i), Currency: currencies[i%len(currencies)]}
		e.Customer.ID = fmt.Sprintf("c-%d", i%97)
		e.Customer.Email = fmt.Sprintf("customer%d@example.com", i%97)
		cents := 0
		for j := range n {
			it := orderItem{SKU: fmt.Sprintf("SKU-%05d", (i*7+j*13)%10000), Qty: 1 + (i+j)%3, Price: float64(199+(i*31+j*17)%9800) / 100}
			cents += it.Qty * int(it.Price*100+0.5)
			e.Items = append(e.Items, it)
		}
		e.Amount = float64(cents) / 100
		b, err := json.Marshal(e)
		if err != nil {
			panic(err)
		}
		if len(b) > size {
			continue
		}
		e.Notes = strings.Repeat("n", size-len(b))
		if b, err = json.Marshal(e); err != nil || len(b) != size {
			panic(fmt.Sprintf("order event of %d bytes, want %d (%v)", len(b), size, err))
		}
		return b, true
	}
	return nil, false
}

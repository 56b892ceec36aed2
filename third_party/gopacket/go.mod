module github.com/google/gopacket

go 1.26.0

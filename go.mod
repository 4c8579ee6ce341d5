module github.com/shellgate/shellgate

go 1.26.8

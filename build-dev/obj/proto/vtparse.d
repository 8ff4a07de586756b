build-dev/obj/proto/vtparse.o: proto/vtparse.c proto/vtparse.h
proto/vtparse.h:

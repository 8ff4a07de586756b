build-dev/obj/termd/render.o: termd/render.c termd/render.h proto/util.h \
 proto/vtparse.h
termd/render.h:
proto/util.h:
proto/vtparse.h:
